"""Deleting whole sessions from the trace store: the one transaction both the writer's
retention pass and `delete_sessions` (`stepahead traces delete`, the API's DELETE) run.

Invariants: a session goes with its steps and their content, all or none, so no reader
ever sees steps without their session or a session missing some; `delete_sessions` runs
through a connection of its own, ordered by SQLite with the writer's transactions, and
gives the freed pages and the WAL back to the file system, its TRUNCATE checkpoint
waiting `WAL_TRUNCATE_WAIT_MS` at most (a reader of an older snapshot leaves that to the
writer's next retention pass).
"""
from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from agents_trace.store_schema import BUSY_TIMEOUT_MS, give_back_free_pages, truncate_wal
from cache.sqlite_transaction import transaction

WAL_TRUNCATE_WAIT_MS = 250    # the most a retention pass's TRUNCATE checkpoint waits for readers and writers


def delete_in_one_transaction(db: sqlite3.Connection, keys: Sequence[tuple[str, str]],
                              begin: str = "BEGIN") -> int:
    """Delete the sessions `keys` ((tenant, session) pairs), their steps and content, all
    or none; the number of steps deleted."""
    with transaction(db, begin):
        deleted = {table: db.executemany(f"DELETE FROM {table} WHERE tenant = ? AND session = ?", keys).rowcount
                   for table in ("step_content", "steps", "sessions")}
    return deleted["steps"]


def delete_sessions(path: Path, keys: Sequence[tuple[str, str]]) -> int:
    """Delete the sessions `keys` from the store at `path`, with their steps and content,
    through a connection of its own (from any thread or process: SQLite orders it with the
    writer's transactions), and give their pages back to the file system, the WAL's too
    (`truncate_wal`: while a gateway holds the store open the WAL outlives this connection;
    a reader on an older snapshot leaves it to the writer's next retention pass); the number
    of steps deleted. A step of such a session still arriving is stored under its id again."""
    db = sqlite3.connect(str(path), isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
    try:
        num_steps = delete_in_one_transaction(db, keys, "BEGIN IMMEDIATE")
        give_back_free_pages(db)
        truncate_wal(db, WAL_TRUNCATE_WAIT_MS)
        return num_steps
    finally:
        db.close()
