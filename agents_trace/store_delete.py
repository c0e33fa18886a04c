"""Deleting whole sessions from the trace store: the transaction both the writer's
retention pass and `delete_sessions` (`stepahead traces delete`, the API's DELETE) run.

Invariants: a session goes with its steps and their content, all or none, in one
transaction, so no reader ever sees steps without their session or a session missing
some; `delete_sessions` runs through a connection of its own, ordered by SQLite with the
writer's transactions, and deletes many sessions in transactions of about
DELETE_BATCH_STEPS steps each (a bigger session alone), pausing after each
(store_locks.let_waiters_in), so a big delete never holds the write lock for seconds and a gateway's
writes go in between (QA194 F1: one transaction for 200k steps held it 15-24 s, past the
writer's 5 s busy timeout); stopped part way, it leaves whole sessions. It then gives the
freed pages and the WAL back to the file system, its TRUNCATE checkpoint waiting
`WAL_TRUNCATE_WAIT_MS` at most (a reader of an older snapshot leaves that to the writer's
next retention pass). A transaction that finds the store locked by another connection past
the busy timeout raises `StoreBusy`, saying so and how many sessions went before it.
"""
from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from agents_trace.store_locks import is_store_busy, let_waiters_in
from agents_trace.store_schema import BUSY_TIMEOUT_MS, give_back_free_pages, truncate_wal
from cache.sqlite_transaction import transaction

WAL_TRUNCATE_WAIT_MS = 250    # the most a retention pass's TRUNCATE checkpoint waits for readers and writers
DELETE_BATCH_STEPS = 2_000    # about the steps one transaction of `delete_sessions` deletes (a bigger session: alone)
DELETE_BATCH_SESSIONS = 256   # the most sessions one transaction of `delete_sessions` deletes


class StoreBusy(sqlite3.OperationalError):
    """Another connection kept the store's write lock past the busy timeout; `num_sessions`
    and `num_steps` were deleted before (whole sessions), the rest not."""

    def __init__(self, num_sessions: int, num_steps: int) -> None:
        super().__init__(f"is locked by another connection (a gateway's write, another delete, a sqlite3 shell) "
                         f"past the {BUSY_TIMEOUT_MS / 1000:g} s busy timeout")
        self.num_sessions, self.num_steps = num_sessions, num_steps


def delete_in_one_transaction(db: sqlite3.Connection, keys: Sequence[tuple[str, str]],
                              begin: str = "BEGIN") -> int:
    """Delete the sessions `keys` ((tenant, session) pairs), their steps and content, all
    or none; the number of steps deleted."""
    with transaction(db, begin):
        deleted = {table: db.executemany(f"DELETE FROM {table} WHERE tenant = ? AND session = ?", keys).rowcount
                   for table in ("step_content", "steps", "sessions")}
    return deleted["steps"]


def session_batches(db: sqlite3.Connection, keys: Sequence[tuple[str, str]],
                    max_steps: int = DELETE_BATCH_STEPS) -> Iterator[list[tuple[str, str]]]:
    """`keys` in order, in runs of whole sessions of at most `max_steps` steps (a session
    with more: alone) and DELETE_BATCH_SESSIONS sessions, as the store counts them now."""
    batch: list[tuple[str, str]] = []
    num_steps = 0
    for key in keys:
        row = db.execute("SELECT num_steps FROM sessions WHERE tenant = ? AND session = ?", key).fetchone()
        size = 0 if row is None else row[0]
        if batch and (num_steps + size > max_steps or len(batch) >= DELETE_BATCH_SESSIONS):
            yield batch
            batch, num_steps = [], 0
        batch.append(key)
        num_steps += size
    if batch:
        yield batch


def delete_sessions(path: Path, keys: Sequence[tuple[str, str]], *, max_steps: int = DELETE_BATCH_STEPS,
                    after_each: Callable[[int, int], None] | None = None) -> int:
    """Delete the sessions `keys` from the store at `path`, with their steps and content,
    through a connection of its own (from any thread or process: SQLite orders it with the
    writer's transactions), a transaction per `session_batches` (about `max_steps` steps)
    with a pause after each, then give their pages back to the file system, the WAL's too
    (`truncate_wal`: while a gateway holds the store open the WAL outlives this connection;
    a reader on an older snapshot leaves it to the writer's next retention pass); the number
    of steps deleted. `after_each(sessions, steps)`, when given, is called after each
    transaction with the totals deleted so far, outside it. A step of such a session still
    arriving is stored under its id again. `StoreBusy` when the store stays locked (see the
    module's docstring)."""
    db = sqlite3.connect(str(path), isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
    try:
        num_sessions = num_steps = 0
        for batch in session_batches(db, keys, max_steps):
            began_s = time.monotonic()
            try:
                num_steps += delete_in_one_transaction(db, batch, "BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if not is_store_busy(exc):
                    raise
                raise StoreBusy(num_sessions, num_steps) from exc
            took_s = time.monotonic() - began_s
            num_sessions += len(batch)
            if after_each is not None:
                after_each(num_sessions, num_steps)
            if num_sessions < len(keys):   # let a waiting writer in before the next
                let_waiters_in(took_s)
        give_back_free_pages(db)
        truncate_wal(db, WAL_TRUNCATE_WAIT_MS)
        return num_steps
    finally:
        db.close()
