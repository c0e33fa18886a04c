"""A SQLite file a gateway keeps: opened on first use, in memory without a path, set
aside and started afresh when damaged."""
from cache.sqlite_file import SqliteFile
from tests.cache.test_damaged_files import damage_pages

SCHEMA = "CREATE TABLE IF NOT EXISTS t (x TEXT);"


def test_without_a_path_the_database_is_in_memory_with_its_schema(tmp_path):
    file = SqliteFile(None, "the test file", SCHEMA)
    file.db.execute("INSERT INTO t VALUES ('a')")
    assert file.db.execute("SELECT x FROM t").fetchall() == [("a",)]
    file.close()
    assert file.db.execute("SELECT count(*) FROM t").fetchone() == (0,)   # a new memory database
    assert list(tmp_path.iterdir()) == []


def test_a_file_is_made_in_wal_mode_and_a_damaged_one_set_aside(tmp_path, caplog):
    path = tmp_path / "sub" / "f.sqlite3"
    file = SqliteFile(path, "the test file", SCHEMA)
    assert file.db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    file.db.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * 50)
    file.close()
    damage_pages(path, table="t")
    count = file.surviving(lambda: file.db.execute("SELECT count(*) FROM t WHERE x != ''").fetchone())
    assert count == (0,)   # asked again on a new, empty file
    assert len(list(path.parent.glob("f.sqlite3.damaged-*[0-9]Z"))) == 1 and "the test file" in caplog.text
    file.close()


def test_rows_and_change_read_and_write_one_statement():
    file = SqliteFile(None, "the test file", SCHEMA)
    assert file.change("INSERT INTO t VALUES (?), (?)", ("a", "b")) == 2
    assert file.rows("SELECT x FROM t ORDER BY x") == [("a",), ("b",)]
    assert file.change("DELETE FROM t WHERE x = ?", ("z",)) == 0 and file.rows("SELECT x FROM t WHERE x = 'z'") == []


def test_a_file_made_before_a_column_was_added_gets_it_and_keeps_its_rows(tmp_path):
    path = tmp_path / "f.sqlite3"
    old = SqliteFile(path, "the test file", SCHEMA)
    old.change("INSERT INTO t VALUES ('kept')")
    old.close()
    newer_schema = "CREATE TABLE IF NOT EXISTS t (x TEXT, y INTEGER);"
    newer = SqliteFile(path, "the test file", newer_schema, added_columns=[("t", "y", "INTEGER")])
    newer.change("INSERT INTO t VALUES ('new', 7)")
    assert newer.rows("SELECT x, y FROM t ORDER BY x") == [("kept", None), ("new", 7)]
    newer.close()
    again = SqliteFile(path, "the test file", newer_schema, added_columns=[("t", "y", "INTEGER")])
    assert again.rows("SELECT count(*) FROM t WHERE y IS NULL") == [(1,)]   # added once, not twice
    again.close()
    fresh = SqliteFile(None, "the test file", newer_schema, added_columns=[("t", "y", "INTEGER")])
    assert fresh.change("INSERT INTO t VALUES ('m', 1)") == 1


def test_a_reads_last_used_mark_waits_for_a_held_lock_briefly_then_the_read_goes_on(tmp_path, caplog):
    """QA128 L4: a read's last-used mark waited SQLite's whole 5 s busy timeout on a file
    another gateway held locked (then failed quietly), so a conversation turn waited 5 s
    before its own append waited 5 s more; now the mark waits MARK_USED_WAIT_MS, and the
    writes after it still wait the whole timeout."""
    import sqlite3
    import time

    from cache.repeated_failures import RepeatedFailures
    from cache.sqlite_file import BUSY_TIMEOUT_MS, MARK_USED_WAIT_MS, written_if_possible
    import logging

    path = tmp_path / "f.sqlite3"
    file = SqliteFile(path, "the test file", SCHEMA)
    file.db.execute("INSERT INTO t VALUES ('a')")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")   # another gateway's write lock
    try:
        started_s = time.monotonic()
        written_if_possible(file.db, lambda: file.db.execute("UPDATE t SET x = 'b'"),
                            RepeatedFailures(logging.getLogger("stepahead.test")), "could not mark it used")
        waited_s = time.monotonic() - started_s
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert waited_s < 2.0 and MARK_USED_WAIT_MS < 1000   # was 5 s
    assert "could not mark it used" in caplog.text
    assert file.db.execute("SELECT x FROM t").fetchall() == [("a",)]   # left unwritten, and the read went on
    assert file.db.execute("PRAGMA busy_timeout").fetchone() == (BUSY_TIMEOUT_MS,)
    file.close()
