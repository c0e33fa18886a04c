"""Size retention of the trace store, fair between tenants: while the data is over its
byte limit, whole sessions are deleted, each the oldest (by last activity) of the tenant
then storing the most steps (ties: by name).

Invariants: no tenant loses a session while another stores more steps, so one within its
share (all steps / tenants stored) keeps its sessions while another floods; space is
counted in steps (`sessions.num_steps`, summed once a pass, O(sessions), then updated as
sessions go), not bytes; a batch deletes at most `SIZE_BATCH_SESSIONS` sessions, fewer
once their steps make up the excess at the pass's mean bytes a step, between two looks
at the size (just over the limit takes one session, not a batch).
"""
from __future__ import annotations

import heapq
import math
import sqlite3
from collections.abc import Callable, Sequence

SIZE_BATCH_SESSIONS = 8   # deleted between two looks at the size


def trim_biggest_first(db: sqlite3.Connection, used_bytes: Callable[[], int], max_bytes: int,
                       delete_sessions: Callable[[Sequence[tuple[str, str]]], None]) -> int:
    """Delete sessions biggest tenant first until `used_bytes()` fits `max_bytes`; the
    number deleted."""
    steps_by_tenant = [(-num_steps, tenant) for tenant, num_steps in db.execute(
        "SELECT tenant, SUM(num_steps) FROM sessions GROUP BY tenant")]
    heapq.heapify(steps_by_tenant)
    bytes_a_step = used_bytes() / max(1, -sum(steps for steps, _ in steps_by_tenant))
    num_removed = 0
    while (excess := used_bytes() - max_bytes) > 0:
        batch = biggest_first(db, steps_by_tenant, SIZE_BATCH_SESSIONS, math.ceil(excess / bytes_a_step))
        if not batch:
            break
        delete_sessions(batch)
        num_removed += len(batch)
    return num_removed


def biggest_first(db: sqlite3.Connection, steps_by_tenant: list[tuple[int, str]], count: int,
                  num_steps: int | None = None) -> list[tuple[str, str]]:
    """Up to `count` (tenant, session) keys to delete next, each the oldest left (by last
    activity) of the tenant then storing the most steps, fewer once they hold `num_steps`.
    `steps_by_tenant` is a heap of (-steps, tenant), updated as if the keys given were
    deleted."""
    chosen: list[tuple[str, str]] = []
    oldest: dict[str, list[tuple[str, int]]] = {}   # per tenant, reversed: pop() is the oldest
    num_chosen_steps = 0
    while steps_by_tenant and len(chosen) < count and (num_steps is None or num_chosen_steps < num_steps):
        negative_steps, tenant = heapq.heappop(steps_by_tenant)
        if tenant not in oldest:   # `count` of them: no tenant gives more to one batch
            oldest[tenant] = db.execute(
                "SELECT session, num_steps FROM sessions WHERE tenant = ? "
                "ORDER BY last_s, session LIMIT ?", (tenant, count)).fetchall()[::-1]
        if not oldest[tenant]:
            continue   # none left (another connection deleted them)
        session, its_steps = oldest[tenant].pop()
        chosen.append((tenant, session))
        num_chosen_steps += its_steps
        if -negative_steps - its_steps > 0:
            heapq.heappush(steps_by_tenant, (negative_steps + its_steps, tenant))
    return chosen
