"""A SQLite file whose tables bear our names but not our columns (QA189 F2) is set aside
when opened, as a damaged one is, and a new one started; an older file of ours is not."""
from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from cache.foreign_tables import declared_tables, find_foreign_tables
from cache.sqlite_file import SqliteFile

SCHEMA = ("CREATE TABLE IF NOT EXISTS t (k TEXT NOT NULL, v TEXT, PRIMARY KEY (k));\n"
          "CREATE INDEX IF NOT EXISTS t_by_v ON t (v);\n")
ADDED = (("t", "w", "INTEGER"),)   # a later version's column
SIDE = "CREATE TABLE IF NOT EXISTS side (a TEXT NOT NULL)"   # a table `migrate` makes


def _file(path: Path) -> SqliteFile:
    return SqliteFile(path, "the test file", SCHEMA + "CREATE TABLE IF NOT EXISTS t2 (z TEXT);", ADDED,
                      migrate=lambda db: db.execute(SIDE))


def _made(path: Path, sql: str) -> bytes:
    db = sqlite3.connect(path)
    db.executescript(sql)
    db.close()
    return path.read_bytes()


def _set_aside(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f"{path.name}.damaged-*[0-9]Z"))


def _works(file: SqliteFile) -> bool:
    file.change("INSERT INTO t (k, v, w) VALUES ('a', 'b', 1)")
    file.change("INSERT INTO side (a) VALUES ('x')")
    return file.rows("SELECT k, v, w FROM t") == [("a", "b", 1)]


@pytest.mark.parametrize("sql, why", [
    ("CREATE TABLE t (x TEXT); INSERT INTO t VALUES ('theirs');", "t lacks k, v"),
    ("CREATE TABLE side (x TEXT);", "side lacks a"),   # a table `migrate` makes is ours too
    ("CREATE TABLE T (K TEXT, x INTEGER NOT NULL);", "t lacks v"),
    ("CREATE VIEW t AS SELECT 1 AS k, 2 AS v, 3 AS w;", "t is a view"),
    ("CREATE TABLE other (k TEXT, v TEXT); CREATE INDEX t ON other (k);", "t is an index"),
])
def test_a_file_whose_tables_are_not_ours_is_set_aside_unwritten_and_a_new_one_works(tmp_path, caplog, sql, why):
    path = tmp_path / "f.sqlite3"
    theirs = _made(path, sql)
    caplog.set_level(logging.WARNING, "stepahead")
    file = _file(path)
    assert _works(file)
    [aside] = _set_aside(path)
    assert aside.read_bytes() == theirs   # moved as it was: not even its journal mode changed
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert record.getMessage() == (f"stepahead: warning: the test file {path} holds tables that are not ours "
                                   f"({why}); moved it to {aside} and started afresh")
    file.close()
    assert _file(path).rows("SELECT k FROM t") == [("a",)]   # reopened: ours now, not set aside again
    assert _set_aside(path) == [aside]


def test_a_file_of_ours_an_older_version_or_another_program_beside_it_made_is_kept(tmp_path, caplog):
    """A file without the added column, without `migrate`'s table, with tables of other names,
    or with columns a later version of ours added (QA196 F3: even NOT NULL without a default,
    which this version cannot insert under, but reads) is ours."""
    path = tmp_path / "f.sqlite3"
    _made(path, "CREATE TABLE t (k TEXT NOT NULL, v TEXT, later TEXT NOT NULL DEFAULT '', "
                "later_still TEXT NOT NULL, PRIMARY KEY (k));"
                "INSERT INTO t (k, v, later_still) VALUES ('old', 'row', 'x'); CREATE TABLE unrelated (x TEXT);")
    caplog.set_level(logging.WARNING, "stepahead")
    file = _file(path)
    assert file.rows("SELECT k, v, w FROM t") == [("old", "row", None)]
    assert _works(_file(tmp_path / "new.sqlite3"))
    assert _set_aside(path) == [] and not caplog.records


def test_the_check_knows_our_tables_from_the_schema_the_added_columns_and_migrate():
    file = _file(None)
    declared = declared_tables(file._create)
    assert declared == {"t": ("k", "v", "w"), "t2": ("z",), "side": ("a",)}
    db = sqlite3.connect(":memory:")
    db.executescript("CREATE TABLE t (k TEXT, v TEXT); CREATE TABLE side (a TEXT, b TEXT)")
    assert find_foreign_tables(db, declared, ADDED) is None
    assert find_foreign_tables(db, declared) == "holds tables that are not ours (t lacks w)"


def test_asked_read_only_a_foreign_file_is_named_and_left_as_it_is(tmp_path):
    """`find_foreign_tables`, for a check that must change nothing (`config check`)."""
    path = tmp_path / "f.sqlite3"
    theirs = _made(path, "CREATE TABLE t (x TEXT); INSERT INTO t VALUES ('theirs');")
    assert _file(path).find_foreign_tables() == "holds tables that are not ours (t lacks k, v)"
    assert path.read_bytes() == theirs and _set_aside(path) == []
    assert _file(tmp_path / "none.sqlite3").find_foreign_tables() is None
    assert not (tmp_path / "none.sqlite3").exists()
    ours = _file(tmp_path / "ours.sqlite3")
    assert _works(ours)
    assert ours.find_foreign_tables() is None
