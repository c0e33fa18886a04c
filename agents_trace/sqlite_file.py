"""Opening a SQLite file the gateway keeps (the trace store, the response archive) when
what lies at its path is not a database.

Invariant: nothing is deleted. A file at `path` that is not a database (it does not
start with SQLite's header: damaged, or some other kind of file) is renamed beside it to
`<name>.damaged-<UTC time>`, with its `-wal` and `-shm` files, a warning names both
paths, and a new database is opened at `path`; the gateway keeps running and recording.
Any other error (a locked file, no permission) is raised as it is.
"""
from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path

log = logging.getLogger("stepahead")

SIDE_FILES = ("-wal", "-shm")
SQLITE_HEADER = b"SQLite format 3\x00"   # the first 16 bytes of every database file


def connect_setting_aside_damaged(path: Path, what: str, **connect_args) -> sqlite3.Connection:
    """`sqlite3.connect(path, **connect_args)`, once a file there that is not a database
    is set aside; `what` names the file in the warning ("the trace store")."""
    if not _is_database_or_empty(path):
        aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        # NOTE: before SQLite opens it: closing a connection deletes a -wal file it cannot use
        os.replace(path, aside)
        for suffix in SIDE_FILES:
            side = path.with_name(path.name + suffix)
            if side.exists():
                os.replace(side, aside.with_name(aside.name + suffix))
        log.warning("stepahead: %s %s is not a SQLite database; moved it to %s and started a new one",
                    what, path, aside)
    return sqlite3.connect(str(path), **connect_args)


def _is_database_or_empty(path: Path) -> bool:
    """Whether SQLite can open the file at `path` as a database: none there, an empty one
    (SQLite writes a new database into it), or one that starts with SQLite's header."""
    try:
        with open(path, "rb") as stream:
            head = stream.read(len(SQLITE_HEADER))
    except (FileNotFoundError, IsADirectoryError):
        return True   # nothing to set aside; a directory fails in sqlite3.connect, as it should
    return head in (b"", SQLITE_HEADER)
