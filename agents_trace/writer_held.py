"""The trace writer's batch held back while another connection holds the store's write
lock: a `stepahead traces delete`, another gateway's transaction, a `sqlite3` shell. SQLite
answers "database is locked" once the writer's busy timeout (store_schema.BUSY_TIMEOUT_MS)
runs out; that is a store that is busy, not failing.

Invariants: a write that fails only because the store is busy loses nothing: its steps,
session ends and ended spans stay held, in order, and go first in the writer's next write
(with what arrived meanwhile, one transaction), tried again every RETRY_S (each try waits
the busy timeout itself) until the lock is gone. At most `max_held_steps` steps are held:
a write that would hold more is dropped, counted and logged as any failed write
(writer_store.py), and so is one still busy when the writer stops. A busy episode logs one
warning as it starts and one line as it ends, never one per try. A flush waits for the held
steps. Any other failure (a damaged store, a full disk) is no busy store and goes as before.
"""
from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass, field

from agents_trace.records import SessionEnded
from agents_trace.store_rows import StepRow

RETRY_S = 0.05            # a held batch is tried again this soon after the last try ended
MAX_HELD_STEPS = 10_000   # steps held at most while the store is busy (as many again as the queue's default)


def is_store_busy(exc: BaseException) -> bool:
    """Whether `exc` says only that another connection holds the store's lock (SQLITE_BUSY
    or SQLITE_LOCKED, extended codes included), not that the store failed."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return str(exc).startswith(("database is locked", "database table is locked"))


@dataclass(slots=True)
class HeldBatch:
    """What the writer could not write yet because the store was busy: `rows` and `ended`
    in queue order, the flush markers waiting for them, and when the busy episode began
    (`busy_since_s`, monotonic; None: no episode)."""

    rows: list[StepRow] = field(default_factory=list)
    ended: list[SessionEnded] = field(default_factory=list)
    flushes: list[threading.Event] = field(default_factory=list)
    busy_since_s: float | None = None

    @property
    def is_held(self) -> bool:
        return self.busy_since_s is not None

    def release(self) -> None:
        """The held batch is written (or dropped): wake its flushes and start afresh."""
        for done in self.flushes:
            done.set()
        self.rows, self.ended, self.flushes, self.busy_since_s = [], [], [], None
