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
