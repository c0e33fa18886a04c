"""One SQLite file a gateway keeps (the response and conversation archives): opened on
first use, set aside when SQLite finds it damaged.

Invariants: one connection, opened lazily by the one thread that uses it (WAL, a 5 s
busy timeout for another gateway on the same file, the schema created, and each of
`added_columns` added to a table made before it existed); `path` None is a database in
memory; `surviving(operation)` makes a call that finds the file damaged again
on a new, empty file, the damaged one set aside, never deleted (`cache.damaged_files`),
and the opening itself survives so: a file whose header or schema SQLite cannot read is
set aside when opened (one warning line), and a new one opened in its place;
only the file the connection opened is set aside: when the path names another by then
(another gateway sharing the file set the damaged one aside first), that one is opened
as it is (QA177).
A file whose tables are not ours (`cache.foreign_tables`: a table we make, `migrate`'s
too, that lacks a column we declare for it but for `added_columns`, QA189 F2) is set aside
the same way when opened, before anything is written to it (one warning line naming the
file and where it went), and a new one opened in its place: statements that name our
columns never meet another program's table. A file an older version of ours made lacks
only `added_columns` (and `migrate`'s later tables, made when opened): it is ours.
A file (and directory) made here is private to this user (`cache.private_paths`: 0600,
and so its -wal and -shm, which SQLite gives the database's mode; directories 0700).
"""
from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from cache.damaged_files import connect_setting_aside_damaged, file_identity, is_damaged_database, read_only_probe, \
    set_aside_opened_database, surviving_damage
from cache.foreign_tables import ForeignTables, column_names, declared_tables, find_foreign_tables
from cache.private_paths import make_private_dirs
from cache.repeated_failures import RepeatedFailures

T = TypeVar("T")
BUSY_TIMEOUT_MS = 5000   # how long a write waits for another gateway's on the same file
MARK_USED_WAIT_MS = 200   # how long a read's last-used mark waits for one


def written_if_possible(db: sqlite3.Connection, write: Callable[[], object], failures: RepeatedFailures,
                        message: str) -> None:
    """Make a write a read only adds to (its last-used time) on `db`: a file that cannot
    take it (full, read-only, or locked by another gateway for more than
    `MARK_USED_WAIT_MS`, not the whole busy timeout: QA128, a turn on a locked file waited
    twice 5 s) leaves it unwritten, logged through `failures` (at most once a minute), and
    the read goes on; damage still raises, for `SqliteFile.surviving`."""
    db.execute(f"PRAGMA busy_timeout = {MARK_USED_WAIT_MS}")
    try:
        write()
    except sqlite3.OperationalError as exc:
        if is_damaged_database(exc):
            raise
        failures.log("mark used", message)
    finally:
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")


def table_columns(db: sqlite3.Connection, table: str) -> set[str]:
    """The names of the columns the file's `table` has."""
    return set(column_names(db, table))


def add_missing_columns(db: sqlite3.Connection, added_columns: Sequence[tuple[str, str, str]]) -> None:
    """Each (table, column, declaration) a later version added to a table, added where the
    file's table lacks it (its rows get the declaration's default, else NULL)."""
    for table, column, declaration in added_columns:
        if column not in table_columns(db, table):
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")


class SqliteFile:
    __slots__ = ("path", "what", "schema", "added_columns", "migrate", "_db", "_opened", "_declared")

    def __init__(self, path: Path | None, what: str, schema: str,
                 added_columns: Sequence[tuple[str, str, str]] = (),
                 migrate: Callable[[sqlite3.Connection], None] | None = None) -> None:
        """`added_columns`: (table, column, declaration) that a later version added to a
        table of `schema` (which has them too): a file made before gets them, NULL in its
        rows. `migrate`, when given, then brings an older file's rows up to date (it must
        be idempotent: it runs at every opening)."""
        self.path = path
        self.what = what   # names it in warnings: "the response archive"
        self.schema = schema
        self.added_columns = tuple(added_columns)
        self.migrate = migrate
        self._db: sqlite3.Connection | None = None
        self._opened: tuple[int, int] | None = None   # file_identity of the file last opened at `path`
        self._declared: dict[str, tuple[str, ...]] | None = None   # our tables and their columns, once known

    def _set_up(self, db: sqlite3.Connection) -> None:
        self._opened = file_identity(self.path)   # at once: the file `db` has just opened
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")  # another gateway on the same file
        self._check_tables_are_ours(db)   # before the first write (WAL is one)
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        self._create(db)

    def _check_tables_are_ours(self, db: sqlite3.Connection) -> None:
        """Raise `ForeignTables` when the file holds a table of ours made by something else."""
        why = find_foreign_tables(db, self._our_tables(), self.added_columns)
        if why is not None:
            raise ForeignTables(why)

    def _our_tables(self) -> dict[str, tuple[str, ...]]:
        """Our tables and their columns: what `_create` makes in an empty database in memory."""
        if self._declared is None:
            self._declared = declared_tables(self._create)
        return self._declared

    def find_foreign_tables(self) -> str | None:
        """Why the file at `path` holds tables that are not ours (what opening it would set
        aside for), asked read-only: nothing is changed, set aside or made (but for the empty
        -wal and -shm SQLite makes beside a WAL database for any reader), for a check that
        must change nothing (`stepahead config check`). None when its tables are ours, there
        is no file, or SQLite cannot read it (damaged, locked: `find_damage` says which)."""
        if self.path is None or not self.path.is_file():
            return None
        declared = self._our_tables()
        try:
            probe = read_only_probe(self.path)   # a locked file: None at once, as find_damage
        except sqlite3.Error:
            return None
        try:
            return find_foreign_tables(probe, declared, self.added_columns)
        except sqlite3.Error:
            return None
        finally:
            probe.close()

    def _create(self, db: sqlite3.Connection) -> None:
        db.executescript(self.schema)
        add_missing_columns(db, self.added_columns)
        if self.migrate is not None:
            self.migrate(db)

    @property
    def db(self) -> sqlite3.Connection:
        """The connection (autocommit: `cache.sqlite_transaction` groups statements)."""
        if self._db is None:
            if self.path is None:
                self._db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
                self._create(self._db)
            else:
                self.surviving(self._connect)
        return self._db

    def _connect(self) -> None:
        """Open the file at `path` and set it up, unless it is open: what a set-aside runs
        (a `SweptIndex`'s reads) may have opened the new one. Damage the opening meets (a
        schema page SQLite cannot read) raises, for `db`'s `surviving` to set it aside."""
        if self._db is None:
            make_private_dirs(self.path.parent)   # the file: made private by connect_setting_aside_damaged
            try:
                self._open()
            except ForeignTables as foreign:   # (its connection closed: `connect_setting_aside_damaged`)
                self.set_aside_damaged(foreign.why)
                if self._db is None:   # (what the set-aside ran may have opened the new one)
                    self._open()

    def _open(self) -> None:
        self._opened = None
        self._db = connect_setting_aside_damaged(self.path, self.what, self._set_up,
                                                 isolation_level=None, check_same_thread=False)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
            self._opened = None

    def set_aside_damaged(self, why: str) -> None:
        """Move the file (with its -wal and -shm) aside, once closed, when the path still
        names the file last opened (or being opened) there; the next call starts a new
        one, or opens the one another gateway started there meanwhile."""
        opened = self._opened
        self.close()
        if self.path is not None:
            set_aside_opened_database(self.path, self.what, why, opened)

    def surviving(self, operation: Callable[[], T]) -> T:
        return surviving_damage(operation, self.set_aside_damaged)

    def rows(self, sql: str, args: Sequence[object] = ()) -> list[tuple]:
        """Every row of one statement, read while surviving damage."""
        return self.surviving(lambda: self.db.execute(sql, args).fetchall())

    def change(self, sql: str, args: Sequence[object] = ()) -> int:
        """Run one statement that writes, surviving damage; the rows it changed."""
        return self.surviving(lambda: self.db.execute(sql, args).rowcount)
