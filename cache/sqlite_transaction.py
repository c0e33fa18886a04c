"""One SQLite transaction on a connection in autocommit mode (`isolation_level=None`).

Invariant: the statements inside `transaction(db)` take effect all together or not at
all: the block's end commits; any exception, Ctrl+C included, rolls back and is raised
(that exception, never one from a ROLLBACK that found the transaction already ended).
"""
from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def transaction(db: sqlite3.Connection, begin: str = "BEGIN") -> Iterator[sqlite3.Connection]:
    """`begin` ("BEGIN", or "BEGIN IMMEDIATE" to take the write lock first), the block,
    then COMMIT; ROLLBACK when the block raises."""
    db.execute(begin)
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:   # SQLite ends it itself on some errors (a full disk, an I/O error)
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                pass   # the error being raised says why; a failed ROLLBACK would hide it
        raise
