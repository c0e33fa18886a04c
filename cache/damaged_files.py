"""Files the gateway keeps (the trace store, the response archive, the predictor's
state) that it cannot read: set aside, never deleted.

Invariant: `set_aside` renames a file (never a directory), and the companion files that belong to it,
beside it to `<name>.damaged-<UTC time>` and warns with both paths; the caller then
starts afresh (a new database, a tenant learned anew) and the gateway keeps running.
`set_aside_or_leave` is the same for state that can start afresh in memory alone (a
tenant's forecaster files): a rename the directory refuses is one warning line, not an
error, and the file stays where it is for its owner never to write over.
A SQLite file is set aside when SQLite reads it as not a database (damaged, or some
other kind of file), and, by the owners that handle it, when SQLite later finds its pages
damaged (`is_damaged_database`); any other error (a locked file, no permission) is
raised as it is. `find_damage` asks SQLite the same, read-only, for a check that must
change nothing (`stepahead config check`).
"""
from __future__ import annotations

import errno
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from cache.error_text import one_line_error
from cache.private_paths import create_private_file

log = logging.getLogger("stepahead")

SQLITE_SIDE_FILES = ("-wal", "-shm")
T = TypeVar("T")


def set_aside(path: Path, what: str, why: str, side_suffixes: Iterable[str] = (),
              companions: Iterable[Path] = ()) -> Path:
    """Rename `path` to `<name>.damaged-<UTC time>` beside it, and what belongs to it
    (each that exists): its side files (`<name><suffix>`, which keep their suffix after
    the new name, so SQLite still pairs them) and its `companions` (each renamed the same
    way as `path`). Warn naming `what` and `why`. Returns the new path. A directory is
    never moved (a setting that names one by mistake would take all it holds along): an
    IsADirectoryError, and it stays where it is."""
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, f"{what} is a directory, not a file; left where it is", str(path))
    stamp = _stamp()
    aside = _aside(path, stamp)
    os.replace(path, aside)
    for suffix in side_suffixes:
        side = path.with_name(path.name + suffix)
        if side.exists():
            os.replace(side, aside.with_name(aside.name + suffix))
    for companion in companions:
        if companion.exists():
            os.replace(companion, _aside(companion, stamp))
    log.warning("stepahead: warning: %s %s %s; moved it to %s and started afresh", what, path, why, aside)
    return aside


def set_aside_or_leave(path: Path, what: str, why: str, companions: Iterable[Path] = ()) -> Path | None:
    """`set_aside` (without side files), or, when the file cannot be renamed (a read-only
    directory), one warning line saying so and None: the file is left as it is, and the
    caller starts afresh without it and must never write over it (what it holds may
    still be recovered by hand). A companion that cannot be renamed once `path` was is
    named in the same line, and left."""
    stamp = _stamp()
    aside = _aside(path, stamp)
    try:
        os.replace(path, aside)
    except OSError as exc:
        log.warning("stepahead: warning: %s %s %s, and could not be set aside either (%s); left it as it is, "
                    "not to be written over, and started afresh", what, path, why, one_line_error(exc))
        return None
    left = []
    for companion in companions:
        try:
            if companion.exists():
                os.replace(companion, _aside(companion, stamp))
        except OSError as exc:
            left.append(f"; left {companion.name} where it is ({one_line_error(exc)})")
    log.warning("stepahead: warning: %s %s %s; moved it to %s and started afresh%s", what, path, why, aside, "".join(left))
    return aside


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def _aside(path: Path, stamp: str) -> Path:
    return path.with_name(f"{path.name}.damaged-{stamp}")


def is_damaged_database(exc: BaseException) -> bool:
    """Whether an SQLite error says the database file itself is damaged (its pages are
    corrupt, or it is not a database), not that it is busy, locked or out of room."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    return isinstance(exc, sqlite3.DatabaseError) and (name.startswith("SQLITE_CORRUPT") or name == "SQLITE_NOTADB")


NOT_A_DATABASE = "is not a SQLite database"   # the `why` of a file SQLite cannot read as one


@dataclass(frozen=True, slots=True)
class Damage:
    """What SQLite found damaged in a database file: `why` in `set_aside`'s words, and
    whether opening the file and its first read meet it (`on_open`), not only a later
    read of a damaged page."""

    why: str
    on_open: bool


def read_only_probe(path: Path) -> sqlite3.Connection:
    """A read-only connection to the database at `path` for a check that changes nothing,
    without a busy wait: a file another connection holds locked fails its first read at once
    (SQLITE_BUSY), for its owner's opening to report, instead of after SQLite's default 5 s."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=0)


def find_damage(path: Path, first_read: str = "SELECT 1 FROM sqlite_master LIMIT 1") -> Damage | None:
    """What SQLite finds damaged in the database at `path`, asked read-only, so nothing is
    changed, set aside or made (but for the empty -wal and -shm SQLite makes beside a WAL
    database for any reader): its header or schema, or what `first_read` reads (`on_open`),
    else any page (`PRAGMA quick_check`: it reads the whole file). None when nothing is
    damaged, there is no file, or SQLite cannot read it for another reason (locked, no
    permission: for its owner's opening to report)."""
    try:
        if not path.is_file():
            return None
        probe = read_only_probe(path)
    except (OSError, sqlite3.Error):
        return None
    try:
        for sql, on_open in ((first_read, True), ("PRAGMA quick_check(1)", False)):
            try:
                rows = probe.execute(sql).fetchall()
            except sqlite3.DatabaseError as exc:
                if getattr(exc, "sqlite_errorname", None) == "SQLITE_NOTADB":
                    return Damage(NOT_A_DATABASE, True)
                if is_damaged_database(exc):
                    return Damage(damaged_because(str(exc)), on_open)
                if not on_open:
                    return None
                continue   # (the first read may name a table an older file lacks: no damage)
            if not on_open and rows and rows[0][0] != "ok":
                return Damage(damaged_because(str(rows[0][0])), False)
        return None
    finally:
        probe.close()


def damaged_because(report: str) -> str:
    """The `why` of a file set aside for what SQLite reported, on one line."""
    return f"is damaged ({' '.join(report.split())})"


def surviving_damage(operation: Callable[[], T], set_aside_database: Callable[[str], None]) -> T:
    """`operation()`; when SQLite finds the database damaged, `set_aside_database(why)`
    (after which `operation` must find a new, empty database) and `operation()` once more."""
    try:
        return operation()
    except sqlite3.DatabaseError as exc:
        if not is_damaged_database(exc):
            raise
        set_aside_database(damaged_because(str(exc)))
    return operation()


def set_aside_database(path: Path, what: str, why: str) -> Path:
    """`set_aside` for a SQLite file, with its -wal and -shm. Close every connection to it
    first: SQLite removes a closed database's -wal by its name, which by then may be a new
    database's."""
    return set_aside(path, what, why, side_suffixes=SQLITE_SIDE_FILES)


def file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`; None when there is none (or no directory)."""
    try:
        status = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return status.st_dev, status.st_ino


def set_aside_opened_database(path: Path, what: str, why: str, opened: tuple[int, int] | None) -> Path | None:
    """`set_aside_database` for the file a connection opened at `path` (`opened`: its
    `file_identity` then; None when not known: the file at `path` is taken to be it), only
    while `path` is still that file: when it is not, another gateway sharing the file
    already set it aside and started a new one there, which is healthy as far as anyone
    knows and is never moved for damage met in the old one (QA177); one warning line says
    so, and None is returned (the caller reopens `path`). Close the connection first."""
    if opened is not None and file_identity(path) != opened:
        log.warning("stepahead: warning: %s %s that this gateway had open %s, and was already moved aside "
                    "(by another gateway sharing it); opened the one now there (what this gateway wrote since "
                    "that move is in the file moved aside)", what, path, why)
        return None
    return set_aside_database(path, what, why)


def connect_setting_aside_damaged(path: Path, what: str,
                                  set_up: Callable[[sqlite3.Connection], None] | None = None,
                                  **connect_args) -> sqlite3.Connection:
    """`sqlite3.connect(path, **connect_args)`, once a file there that is not a database
    is set aside (`what` names it in the warning: "the trace store"), a file it makes
    private to this user (`cache.private_paths`: 0600, as SQLite then makes its -wal and
    -shm; an existing one keeps its mode), then `set_up` on
    the connection (pragmas, schema). When `set_up` fails, the connection is closed at
    once, not when collected (so a file set aside meanwhile keeps its -wal), and the
    error raised."""
    if not _is_database(path):
        set_aside_database(path, what, NOT_A_DATABASE)
    create_private_file(path)   # when none is there: before SQLite makes it with the umask's mode
    connection = sqlite3.connect(str(path), **connect_args)
    if set_up is None:
        return connection
    try:
        set_up(connection)
    except BaseException:
        connection.close()
        raise
    return connection


def _is_database(path: Path) -> bool:
    """False only for a file SQLite reads as not a database (SQLITE_NOTADB); True for
    none, an empty one, a database, and anything else SQLite reports (a locked file is
    left for the caller's connection to report).

    NOTE: asked through SQLite, read-only, not by reading the header with open():
    closing any descriptor of a file drops every POSIX lock this process holds on it,
    those of other connections to the same database included (SQLite's own descriptors
    are closed with care for that), which broke concurrent connections (disk I/O
    errors); read-only, so SQLite deletes no -wal file it cannot use; without a busy wait
    (a file another connection holds locked is answered at once, not after 5 s)."""
    if not path.is_file():
        return True
    probe = read_only_probe(path)
    try:
        probe.execute("PRAGMA schema_version").fetchone()
        return True
    except sqlite3.DatabaseError as exc:
        return getattr(exc, "sqlite_errorname", None) != "SQLITE_NOTADB"
    finally:
        probe.close()
