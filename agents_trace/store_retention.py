"""Size retention of the trace store, fair between tenants: while the data is over its
byte limit, whole sessions are deleted, each the oldest (by last activity) of the tenant
then storing the most bytes (ties: by name).

Invariants: no tenant loses a session while another stores more bytes, so one within its
share (all bytes / tenants stored) keeps its sessions while another floods, however few
and large the flooder's steps (QA179 F1: a few refused requests, each keeping a body of up
to `max_body_bytes`, took another tenant's many small sessions when space was counted in
steps). A session's bytes are `sessions.num_bytes`, and its `num_counted_steps` says how
many of its `num_steps` they count: the writer adds each step's `charged_bytes` (its `steps`
row and its `step_content` row: text as UTF-8, a number as 8, NULL as nothing) as it stores
the step, and adds 1 to both counts (store_rows.UPSERT_SESSION). A step an older version's
writer stores (a rollback, or an older gateway sharing the store) adds to `num_steps`
alone, so its session falls behind (`UNCOUNTED_SQL`: a partial index, which SQLite keeps
for every writer whatever its version, finds them). `backfill_sql` counts a session again
from its stored rows, the same count in SQL, and sets `num_counted_steps` to `num_steps`:
every session of a store made before the column, and every session behind, when a writer
opens the store (store_schema.py) and at the start of each pass (`recount_uncounted`: an
older writer may be writing beside this one), so a pass charges each tenant every step
stored when it began (QA183 F1: an older writer's sessions, counted 0, made the tenant
within its share lose its traces); a pass with none behind costs one probe of that index.
A pass sums the bytes by tenant once (O(sessions), each session counted at least 1), then
updates the sums as sessions go; the pages SQLite uses beside those bytes (indexes, page
headroom) are spread over them at the pass's ratio of used bytes to counted bytes. A batch
deletes at most `SIZE_BATCH_SESSIONS` sessions, fewer once their bytes make up the excess
at that ratio, between two looks at the size (just over the limit takes one session, not
a batch). The freed pages then go back to the file system a few at a time
(store_schema.give_back_free_pages).
"""
from __future__ import annotations

import heapq
import math
import sqlite3
from collections.abc import Callable, Iterable, Sequence

from cache.sqlite_file import table_columns
from cache.sqlite_transaction import transaction

SIZE_BATCH_SESSIONS = 8   # deleted between two looks at the size
SESSION_CHARGE_SQL = "MAX(num_bytes, 1)"   # what a session counts for its tenant
# a session holding steps its `num_bytes` leaves out (an older version's writer stored them);
# the WHERE of store_schema's partial index `sessions_uncounted`, word for word, so SQLite uses it
UNCOUNTED_SQL = "num_counted_steps <> num_steps"
RECOUNT_BATCH_SESSIONS = 512   # sessions `recount_uncounted` counts in one transaction


def charged_bytes(values: Iterable[object]) -> int:
    """About the bytes a row of `values` stores: text as UTF-8, bytes as they are, a
    number as 8, None as nothing (`value_bytes_sql` counts a stored row alike)."""
    total = 0
    for value in values:
        if isinstance(value, str):
            total += len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
        elif isinstance(value, bytes):
            total += len(value)
        elif value is not None:
            total += 8
    return total


def value_bytes_sql(column: str) -> str:
    """`charged_bytes` of one stored column, in SQL."""
    return (f"CASE typeof({column}) WHEN 'text' THEN length(CAST({column} AS BLOB)) "
            f"WHEN 'blob' THEN length({column}) WHEN 'null' THEN 0 ELSE 8 END")


def backfill_sql(db: sqlite3.Connection, where: str = "") -> str:
    """An UPDATE setting a session's `num_bytes` to the `charged_bytes` of its stored steps
    and their content (the columns `db`'s tables have) and its `num_counted_steps` to its
    `num_steps`: every session's (one pass over the store), or, with `where` (a WHERE
    clause), those it selects."""
    def rows_sum(table: str) -> str:
        row = " + ".join(value_bytes_sql(f"{table}.{column}") for column in sorted(table_columns(db, table)))
        return (f"COALESCE((SELECT SUM({row}) FROM {table} WHERE {table}.tenant = sessions.tenant "
                f"AND {table}.session = sessions.session), 0)")
    return (f"UPDATE sessions SET num_bytes = {rows_sum('steps')} + {rows_sum('step_content')}, "
            f"num_counted_steps = num_steps{where}")


def recount_uncounted(db: sqlite3.Connection, batch_sessions: int = RECOUNT_BATCH_SESSIONS) -> int:
    """Count again every session holding steps its `num_bytes` leaves out (`UNCOUNTED_SQL`),
    `batch_sessions` a write transaction (the writers of other processes wait one batch at
    most); the number counted. None to count: one probe of the partial index. Call it
    outside a transaction."""
    if db.execute(f"SELECT 1 FROM sessions WHERE {UNCOUNTED_SQL} LIMIT 1").fetchone() is None:
        return 0
    recount = backfill_sql(db, f" WHERE (tenant, session) IN (SELECT tenant, session FROM sessions "
                               f"WHERE {UNCOUNTED_SQL} LIMIT {int(batch_sessions)})")
    num_counted = 0
    while True:
        with transaction(db, "BEGIN IMMEDIATE"):   # counted and marked under one write lock
            num_batch = db.execute(recount).rowcount
        num_counted += num_batch
        if num_batch < batch_sessions:
            return num_counted


def trim_biggest_first(db: sqlite3.Connection, used_bytes: Callable[[], int], max_bytes: int,
                       delete_sessions: Callable[[Sequence[tuple[str, str]]], None]) -> int:
    """Delete sessions biggest tenant first until `used_bytes()` fits `max_bytes`; the
    number deleted."""
    bytes_by_tenant = [(-num_bytes, tenant) for tenant, num_bytes in db.execute(
        f"SELECT tenant, SUM({SESSION_CHARGE_SQL}) FROM sessions GROUP BY tenant")]
    heapq.heapify(bytes_by_tenant)
    used_a_counted_byte = used_bytes() / max(1, -sum(num_bytes for num_bytes, _ in bytes_by_tenant))
    num_removed = 0
    while (excess := used_bytes() - max_bytes) > 0:
        batch = biggest_first(db, bytes_by_tenant, SIZE_BATCH_SESSIONS, math.ceil(excess / used_a_counted_byte))
        if not batch:
            break
        delete_sessions(batch)
        num_removed += len(batch)
    return num_removed


def biggest_first(db: sqlite3.Connection, bytes_by_tenant: list[tuple[int, str]], count: int,
                  num_bytes: int | None = None) -> list[tuple[str, str]]:
    """Up to `count` (tenant, session) keys to delete next, each the oldest left (by last
    activity) of the tenant then storing the most bytes, fewer once they hold `num_bytes`.
    `bytes_by_tenant` is a heap of (-bytes, tenant), updated as if the keys given were
    deleted."""
    chosen: list[tuple[str, str]] = []
    oldest: dict[str, list[tuple[str, int]]] = {}   # per tenant, reversed: pop() is the oldest
    num_chosen_bytes = 0
    while bytes_by_tenant and len(chosen) < count and (num_bytes is None or num_chosen_bytes < num_bytes):
        negative_bytes, tenant = heapq.heappop(bytes_by_tenant)
        if tenant not in oldest:   # `count` of them: no tenant gives more to one batch
            oldest[tenant] = db.execute(
                f"SELECT session, {SESSION_CHARGE_SQL} FROM sessions WHERE tenant = ? "
                "ORDER BY last_s, session LIMIT ?", (tenant, count)).fetchall()[::-1]
        if not oldest[tenant]:
            continue   # none left (another connection deleted them)
        session, its_bytes = oldest[tenant].pop()
        chosen.append((tenant, session))
        num_chosen_bytes += its_bytes
        if -negative_bytes - its_bytes > 0:
            heapq.heappush(bytes_by_tenant, (negative_bytes + its_bytes, tenant))
    return chosen
