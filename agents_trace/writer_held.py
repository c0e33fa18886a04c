"""The trace writer's batch held back while another connection holds the store's write
lock: a `stepahead traces delete`, another gateway's transaction, a `sqlite3` shell. SQLite
answers "database is locked" once the writer's busy timeout (store_schema.BUSY_TIMEOUT_MS)
runs out; that is a store that is busy, not failing.

Invariants: a write that fails only because the store is busy loses nothing: its steps,
session ends and ended spans stay held, in order, and go first in the writer's next write
(with what arrived meanwhile), tried again every RETRY_S (each try waits the busy timeout
itself) until the lock is gone. A write of more than WRITE_CHUNK_STEPS steps (a held batch)
goes in transactions of at most that many, in order, pausing after each (store_locks.let_waiters_in) so a connection waiting for the lock gets it in between: no transaction of
the writer's holds the lock for seconds (QA197 F2: 3,000 held steps in one held it 5.4 s,
past the busy timeout); the session ends and ended spans go with the last, after their
steps; a part finding the store busy again leaves the rest held (writer_batches.py). At
most `max_held_steps` steps are held: a write that would hold more is dropped, counted
(failed writes and steps lost: writer_stats.py) and logged as any failed write
(writer_store.py), and so is one still busy when the writer stops. A busy episode logs one
warning as it starts and one line as it ends, never one per try. A flush waits for the held
steps. Any other failure (a damaged store, a full disk) is no busy store and goes as before.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from agents_trace.records import SessionEnded
from agents_trace.store_rows import StepRow

RETRY_S = 0.05            # a held batch is tried again this soon after the last try ended
MAX_HELD_STEPS = 10_000   # steps held at most while the store is busy (as many again as the queue's default)
# NOTE: 3,000 held steps with content took 5.4 s in one transaction (QA197): 500 take
# about 0.9 s at that rate, and the pause after each (store_locks.let_waiters_in) lets a
# waiting connection in.
WRITE_CHUNK_STEPS = 500


@dataclass(slots=True)
class HeldBatch:
    """What the writer could not write yet because the store was busy: `rows` and `ended`
    in queue order, the flush markers waiting for them, when the busy episode began
    (`busy_since_s`, monotonic; None: no episode), the rows its earlier parts' writes moved
    ((tenant, session, index asked) -> index given: store.py) and how many steps of the
    episode are written so far."""

    rows: list[StepRow] = field(default_factory=list)
    ended: list[SessionEnded] = field(default_factory=list)
    flushes: list[threading.Event] = field(default_factory=list)
    busy_since_s: float | None = None
    moved: dict[tuple[str, str, int], int] = field(default_factory=dict)
    num_written: int = 0

    @property
    def is_held(self) -> bool:
        return self.busy_since_s is not None

    def release(self) -> None:
        """The held batch is written (or dropped): wake its flushes and start afresh."""
        for done in self.flushes:
            done.set()
        self.rows, self.ended, self.flushes, self.busy_since_s, self.moved, self.num_written = [], [], [], None, {}, 0
