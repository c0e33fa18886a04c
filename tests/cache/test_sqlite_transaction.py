"""One SQLite transaction: all of the block's statements or none."""
from __future__ import annotations

import sqlite3

import pytest

from cache.sqlite_transaction import transaction


def test_the_block_commits_whole_or_rolls_back_whole(tmp_path):
    db = sqlite3.connect(tmp_path / "t.sqlite", isolation_level=None)
    db.execute("CREATE TABLE t (x)")
    with transaction(db) as same:
        assert same is db
        db.executemany("INSERT INTO t VALUES (?)", [(1,), (2,)])
    with pytest.raises(KeyboardInterrupt):
        with transaction(db, "BEGIN IMMEDIATE"):
            db.execute("INSERT INTO t VALUES (3)")
            raise KeyboardInterrupt   # Ctrl+C mid-way: none of the block stays
    assert db.execute("SELECT x FROM t ORDER BY x").fetchall() == [(1,), (2,)]
    assert not db.in_transaction


def test_a_full_database_raises_its_own_error_not_a_failed_rollback(tmp_path):
    db = sqlite3.connect(tmp_path / "t.sqlite", isolation_level=None)
    db.execute("CREATE TABLE t (x)")
    db.execute("PRAGMA max_page_count = 4")   # the file is full after a few pages
    with pytest.raises(sqlite3.OperationalError, match="full"):
        with transaction(db):
            db.executemany("INSERT INTO t VALUES (?)", [("x" * 1000,) for _ in range(100)])
    assert not db.in_transaction and db.execute("SELECT COUNT(*) FROM t").fetchone() == (0,)


def test_a_block_that_ended_the_transaction_itself_raises_its_own_error(tmp_path):
    db = sqlite3.connect(tmp_path / "t.sqlite", isolation_level=None)
    db.execute("CREATE TABLE t (x)")
    with pytest.raises(ValueError, match="the block's own"):
        with transaction(db):
            db.execute("INSERT INTO t VALUES (1)")
            db.execute("ROLLBACK")   # as SQLite does itself after some errors
            raise ValueError("the block's own")
    assert db.execute("SELECT COUNT(*) FROM t").fetchone() == (0,)
