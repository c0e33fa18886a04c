"""A store file that is not a database is set aside, never deleted, and a new one opened."""
from __future__ import annotations

import logging
import sqlite3

import pytest

from cache.damaged_files import connect_setting_aside_damaged, is_damaged_database, set_aside, surviving_damage
from agents_trace.store import TraceStore


def _damaged(tmp_path, name="traces.sqlite"):
    path = tmp_path / name
    path.write_bytes(b"not a database, but someone's bytes")
    (tmp_path / f"{name}-wal").write_bytes(b"its log")
    return path


def test_a_file_that_is_not_a_database_is_moved_aside_with_its_log_and_a_new_one_opened(tmp_path, caplog):
    path = _damaged(tmp_path)
    with caplog.at_level(logging.WARNING, logger="stepahead"):
        connection = connect_setting_aside_damaged(path, "the trace store")
    connection.execute("CREATE TABLE t (x)")
    connection.execute("INSERT INTO t VALUES (1)")
    connection.commit()
    [aside] = tmp_path.glob("traces.sqlite.damaged-*[0-9]Z")
    assert aside.read_bytes() == b"not a database, but someone's bytes"
    assert (tmp_path / f"{aside.name}-wal").read_bytes() == b"its log"
    assert not (tmp_path / "traces.sqlite-wal").exists()
    assert sqlite3.connect(path).execute("SELECT x FROM t").fetchall() == [(1,)]
    assert f"the trace store {path} is not a SQLite database; moved it to {aside}" in caplog.text


def test_a_database_and_a_missing_file_are_opened_as_they_are(tmp_path, caplog):
    path = tmp_path / "kept.sqlite"
    with sqlite3.connect(path) as first:
        first.execute("CREATE TABLE t (x)")
        first.execute("INSERT INTO t VALUES (7)")
    with caplog.at_level(logging.WARNING, logger="stepahead"):
        assert connect_setting_aside_damaged(path, "x").execute("SELECT x FROM t").fetchall() == [(7,)]
        connect_setting_aside_damaged(tmp_path / "new.sqlite", "x").execute("CREATE TABLE t (x)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.sqlite", "new.sqlite"]
    assert caplog.text == ""


def test_other_errors_are_raised_and_nothing_is_moved(tmp_path):
    directory = tmp_path / "a directory"
    directory.mkdir()
    with pytest.raises(sqlite3.OperationalError):
        connect_setting_aside_damaged(directory, "x")
    assert directory.is_dir() and list(tmp_path.iterdir()) == [directory]


def test_the_trace_store_opens_over_a_damaged_file(tmp_path):
    path = _damaged(tmp_path)
    store = TraceStore(path, max_age_s=3600, max_bytes=1 << 20)
    store.open()
    try:
        assert store.db.execute("PRAGMA auto_vacuum").fetchone() == (2,)   # set up as a new store
        assert store.index_offset("acme", "s1", 0) == 0
    finally:
        store.close()
    [aside] = tmp_path.glob("traces.sqlite.damaged-*[0-9]Z")
    assert (tmp_path / f"{aside.name}-wal").read_bytes() == b"its log"   # the file and its log


def test_the_check_keeps_this_process_s_locks_on_the_database(tmp_path):
    """Closing any descriptor of a file drops every POSIX lock this process holds on it:
    a check that read the header with open() let another process write while a
    connection here held the write lock (the shared test gateways' trace store then
    failed with disk I/O errors)."""
    import subprocess
    import sys

    path = tmp_path / "traces.sqlite"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")   # the write lock, held
    connect_setting_aside_damaged(path, "the trace store").close()
    other = subprocess.run(
        [sys.executable, "-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], timeout=0); "
         "c.execute('INSERT INTO t VALUES (2)'); c.commit()", str(path)],
        capture_output=True, text=True, timeout=60)
    assert other.returncode != 0 and "database is locked" in other.stderr, other.stderr[-500:]
    holder.execute("COMMIT")


def damage_pages(path, table: str | None = None) -> None:
    """Overwrite every page of the SQLite file at `path` but the first (its header and
    schema), or only `table`'s first page, with bytes no page can hold: it opens, and
    SQLite finds it damaged once it reads there. The file must be closed (its log
    checkpointed) by every connection."""
    data = bytearray(path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    assert len(data) > page_size, "a one-page database has nothing to damage"
    if table is None:
        data[page_size:] = b"\xff" * (len(data) - page_size)
    else:
        with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as db:
            [(root,)] = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchall()
        assert root > 1
        data[(root - 1) * page_size:root * page_size] = b"\xff" * page_size
    path.write_bytes(bytes(data))


def test_damage_is_told_from_a_busy_or_missing_database(tmp_path):
    path = tmp_path / "d.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (x)")
        db.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * 50)
    damage_pages(path)
    with pytest.raises(sqlite3.DatabaseError) as damaged:
        sqlite3.connect(path).execute("SELECT count(*) FROM t").fetchone()
    assert is_damaged_database(damaged.value)
    holder = sqlite3.connect(tmp_path / "busy.sqlite", isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    with pytest.raises(sqlite3.OperationalError) as busy:
        sqlite3.connect(tmp_path / "busy.sqlite", timeout=0).execute("SELECT * FROM t").fetchall()
    assert "locked" in str(busy.value) and not is_damaged_database(busy.value)
    assert not is_damaged_database(ValueError("database disk image is malformed"))


def test_surviving_damage_sets_aside_once_and_runs_the_call_again():
    calls, set_aside_for = [], []

    def operation():
        calls.append(1)
        if len(calls) == 1:
            error = sqlite3.DatabaseError("database disk image is malformed")
            error.sqlite_errorname = "SQLITE_CORRUPT"
            raise error
        return "written"

    assert surviving_damage(operation, set_aside_for.append) == "written"
    assert len(calls) == 2 and set_aside_for == ["is damaged (database disk image is malformed)"]
    locked = sqlite3.OperationalError("database is locked")
    locked.sqlite_errorname = "SQLITE_BUSY"

    def busy():
        raise locked

    with pytest.raises(sqlite3.OperationalError):   # not damage: raised, nothing set aside
        surviving_damage(busy, set_aside_for.append)
    assert len(set_aside_for) == 1


def test_a_connection_whose_set_up_fails_is_closed_at_once(tmp_path):
    opened = []

    def set_up(connection):
        opened.append(connection)
        raise sqlite3.OperationalError("database or disk is full")

    with pytest.raises(sqlite3.OperationalError, match="disk is full"):
        connect_setting_aside_damaged(tmp_path / "s.sqlite", "x", set_up)
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        opened[0].execute("SELECT 1")


def test_set_aside_or_leave_moves_a_file_and_its_companions(tmp_path, caplog):
    from cache.damaged_files import set_aside_or_leave

    path, companion = tmp_path / "t-a.npz", tmp_path / "t-a.json"
    path.write_bytes(b"garbage")
    companion.write_text("{}")
    with caplog.at_level(logging.WARNING, logger="stepahead"):
        aside = set_aside_or_leave(path, "the state", "could not be read (bad)", companions=[companion])
    assert aside is not None and aside.read_bytes() == b"garbage" and not path.exists()
    assert [p.read_text() for p in tmp_path.glob("t-a.json.damaged-*")] == ["{}"]
    assert f"the state {path} could not be read (bad); moved it to {aside} and started afresh" in caplog.text


def test_set_aside_or_leave_says_in_one_line_that_a_file_it_cannot_move_is_left(tmp_path, caplog, monkeypatch):
    """A read-only directory: the rename is refused. That is a warning, not an error (the
    caller starts that file's state afresh, in memory), and the file stays untouched."""
    from types import SimpleNamespace

    from cache import damaged_files

    def refuse(source, target):
        raise PermissionError(1, "Operation not permitted", str(source), None, str(target))

    monkeypatch.setattr(damaged_files, "os", SimpleNamespace(replace=refuse))
    path = tmp_path / "t-a.json"
    path.write_text("{cut")
    with caplog.at_level(logging.WARNING, logger="stepahead"):
        assert damaged_files.set_aside_or_leave(path, "the state", "could not be read (bad)") is None
    assert path.read_text() == "{cut" and list(tmp_path.iterdir()) == [path]
    [record] = caplog.records
    assert record.exc_info is None and "\n" not in record.getMessage()
    assert (f"the state {path} could not be read (bad), and could not be set aside either (PermissionError: "
            in record.getMessage() and "left it as it is, not to be written over" in record.getMessage())


def test_a_directory_is_never_set_aside(tmp_path):
    kept = tmp_path / "state"
    (kept / "inside").mkdir(parents=True)
    with pytest.raises(IsADirectoryError, match="is a directory, not a file; left where it is"):
        set_aside(kept, "the tenants' spent tokens", "could not be read")
    assert (kept / "inside").is_dir() and [p.name for p in tmp_path.iterdir()] == ["state"]


def test_the_read_only_checks_answer_a_file_another_connection_holds_locked_at_once(tmp_path):
    """`find_damage` and `find_foreign_tables` (config check's) and the open's probe leave a
    locked file to its owner's opening at once, not after SQLite's 5 s default busy wait
    each (QA203 F7)."""
    import time

    from cache.damaged_files import _is_database, find_damage
    from cache.sqlite_file import SqliteFile

    path = tmp_path / "held.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        began_s = time.monotonic()
        assert find_damage(path) is None and _is_database(path)
        assert SqliteFile(path, "the test file", "CREATE TABLE IF NOT EXISTS t (x);").find_foreign_tables() is None
        assert time.monotonic() - began_s < 2.5   # not waited out (5 s each before)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
