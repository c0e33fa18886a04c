"""Two gateways sharing one SQLite file (`cache.sqlite_file`): the second to meet damage
in it never sets aside the new, healthy file the first started at the path (QA177)."""
from __future__ import annotations

import logging

from cache.sqlite_file import SqliteFile
from tests.cache.test_damaged_files import damage_pages

SCHEMA = "CREATE TABLE IF NOT EXISTS t (x TEXT);"


def _shared_damaged_file(tmp_path):
    """A file with rows whose table is damaged, and two stores (two gateways) with a
    connection open on it."""
    path = tmp_path / "files.sqlite3"
    maker = SqliteFile(path, "the test index", SCHEMA)
    maker.db.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * 50)
    maker.close()
    damage_pages(path, table="t")
    first, second = SqliteFile(path, "the test index", SCHEMA), SqliteFile(path, "the test index", SCHEMA)
    first.db, second.db   # both open the damaged file (its schema page is whole)
    return path, first, second


def test_the_second_store_to_meet_the_damage_reopens_the_new_file_instead_of_setting_it_aside(tmp_path, caplog):
    path, first, second = _shared_damaged_file(tmp_path)
    assert first.rows("SELECT count(*) FROM t WHERE x != ''") == [(0,)]   # set aside, started afresh
    first.change("INSERT INTO t VALUES ('acknowledged')")
    [aside] = path.parent.glob("files.sqlite3.damaged-*[0-9]Z")
    with caplog.at_level(logging.WARNING, logger="stepahead"):
        seen = second.rows("SELECT x FROM t WHERE x != ''")   # its connection: still the old, damaged file
    assert seen == [("acknowledged",)]   # it reads the healthy file now at the path
    assert list(path.parent.glob("files.sqlite3.damaged-*[0-9]Z")) == [aside]   # the new file was not moved
    assert first.rows("SELECT x FROM t") == [("acknowledged",)]
    assert path.with_name("files.sqlite3-wal").exists()   # closing the old connection left the new file's log
    later = SqliteFile(path, "the test index", SCHEMA)   # a gateway started now
    assert later.rows("SELECT x FROM t") == [("acknowledged",)]
    later.close()
    assert f"the test index {path} that this gateway had open is damaged" in caplog.text
    assert "already moved aside (by another gateway sharing it)" in caplog.text
    second.change("INSERT INTO t VALUES ('also')")   # both write to the one file from then on
    assert first.rows("SELECT x FROM t ORDER BY x") == [("acknowledged",), ("also",)]
    first.close()
    second.close()


def test_a_store_alone_on_its_file_still_sets_it_aside(tmp_path):
    path, first, second = _shared_damaged_file(tmp_path)
    second.close()
    assert first.rows("SELECT count(*) FROM t WHERE x != ''") == [(0,)]
    first.close()   # reopened on the new file, which is not set aside again
    assert first.rows("SELECT count(*) FROM t") == [(0,)]
    assert len(list(path.parent.glob("files.sqlite3.damaged-*[0-9]Z"))) == 1
    first.close()


def test_damage_met_while_opening_still_sets_the_file_just_opened_aside(tmp_path):
    """Damage met by the set-up (here a migration reading the table), before the store
    holds a connection: the file it was opening is the one at the path, so set aside."""
    path = tmp_path / "files.sqlite3"
    maker = SqliteFile(path, "the test index", SCHEMA)
    maker.db.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * 50)
    maker.close()
    damage_pages(path, table="t")
    store = SqliteFile(path, "the test index", SCHEMA,
                       migrate=lambda db: db.execute("SELECT count(*) FROM t WHERE x != ''").fetchall())
    assert store.rows("SELECT count(*) FROM t") == [(0,)]
    assert len(list(path.parent.glob("files.sqlite3.damaged-*[0-9]Z"))) == 1
    store.close()
