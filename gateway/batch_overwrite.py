"""How a batch's stored record is rewritten by its runner's writes (`KEPT_OVER`, the SET
of batch_store's upsert): gateways sharing one store each write the batches they run,
and a cancel one of them records must stand against the runner's own later writes, in
one SQL statement, so no cancel made meanwhile by another process is lost (QA231 F1).
"""
from __future__ import annotations

from gateway.batch_record import UNFINISHED

# a record's status, in SQL ({} the record's column); NULL for one that is no JSON, which
# json_extract would fail the whole statement on
STATUS = "CASE WHEN json_valid({0}) THEN json_extract({0}, '$.status') END"


def _kept_over() -> str:
    """How a record is rewritten (QA231 F1: gateways sharing the store; the runner's own
    writes, in one statement, so a cancel made meanwhile by another process is never lost):
    over a `cancelling` record, progress (`in_progress`, `finalizing`) is kept with its
    counts but stays `cancelling`, `completed` becomes the `cancelled` end (its time the
    `cancelled_at`), and the `cancelling_at` kept is the cancel's; a `cancelled` record
    takes no other status, an ended one no unfinished one (a cancel that came too late)."""
    kept, new = STATUS.format("batches.record"), "json_extract(excluded.record, '$.status')"
    cancel_at = "'cancelling_at', json_extract(batches.record, '$.times.cancelling_at')"   # (null: none set)
    ended, unfinished = ", ".join(f"'{s}'" for s in ENDED), ", ".join(f"'{s}'" for s in UNFINISHED)
    return (f"record = CASE WHEN {kept} IS NOT 'cancelling' THEN excluded.record "
            f"WHEN {new} IN ('in_progress', 'finalizing') THEN json_patch(excluded.record, json_object("
            f"'status', 'cancelling', 'times', json_object('finalizing_at', NULL, {cancel_at}))) "
            f"WHEN {new} = 'completed' THEN json_patch(excluded.record, json_object('status', 'cancelled', "
            f"'times', json_object('finalizing_at', NULL, 'completed_at', NULL, {cancel_at}, "
            "'cancelled_at', json_extract(excluded.record, '$.times.completed_at')))) "
            f"ELSE json_patch(excluded.record, json_object('times', json_object({cancel_at}))) END "
            f"WHERE NOT (COALESCE({kept}, '') IN ({ended}) AND {new} IN ({unfinished})) "
            f"AND NOT ({kept} IS 'cancelled' AND {new} IS NOT 'cancelled')")


ENDED = ("completed", "failed", "expired", "cancelled")
KEPT_OVER = _kept_over()
