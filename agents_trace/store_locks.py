"""Another connection's write lock on the trace store: telling "busy" from a failure,
asking whether it is held now, and letting a waiting connection in between the write
transactions of a long job (a big `traces delete`, a held batch's parts).

Invariants: `is_store_busy` is true only for SQLite's BUSY and LOCKED answers, never for a
damaged or full store; `is_write_locked` never waits and takes the lock for no time;
`let_waiters_in` sleeps LOCK_PAUSE_SHARE of the last transaction's time, within
LOCK_PAUSE_S, so no job of ours holds the lock for seconds while another connection waits.
"""
from __future__ import annotations

import sqlite3
import time

# NOTE: a connection waiting for the lock polls every 100 ms at most (SQLite's busy
# handler): a pause of half the last transaction's time (5 ms to 100 ms) lets it in soon
# while the job keeps two thirds of its speed.
LOCK_PAUSE_SHARE = 0.5
LOCK_PAUSE_S = (0.005, 0.1)


def let_waiters_in(took_s: float) -> None:
    """Sleep after a write transaction that took `took_s`, before the job's next one."""
    low_s, high_s = LOCK_PAUSE_S
    time.sleep(min(high_s, max(low_s, LOCK_PAUSE_SHARE * took_s)))


def is_write_locked(db: sqlite3.Connection) -> bool:
    """Whether another connection holds the store's write lock now: one try at it that
    never waits (and takes it for no time). Call it outside a transaction."""
    timeout_ms = db.execute("PRAGMA busy_timeout").fetchone()[0]
    db.execute("PRAGMA busy_timeout = 0")
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if is_store_busy(exc):
            return True
        raise
    finally:
        db.execute(f"PRAGMA busy_timeout = {int(timeout_ms)}")
    db.execute("ROLLBACK")
    return False


def is_store_busy(exc: BaseException) -> bool:
    """Whether `exc` says only that another connection holds the store's lock (SQLITE_BUSY
    or SQLITE_LOCKED, extended codes included), not that the store failed."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return str(exc).startswith(("database is locked", "database table is locked"))
