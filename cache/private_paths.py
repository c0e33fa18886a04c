"""Files and directories that hold tenants' data (traces, stored responses and
conversations, uploaded files, spent tokens, forecasts): private to the user the gateway
runs as, whatever its umask.

Invariants: what these functions create is private, a file 0600 and a directory 0700
(each directory of a path that was missing, not only the last), fixed by the mode given
to the call that creates it (`os.open`, `mkdir`): never by the process-wide umask, which
other threads would see changed meanwhile. A umask stricter than that makes it stricter
still. What already exists keeps its mode: these functions never change the mode of a
file or directory they did not create (the operator's, or one an older version made).

NOTE: SQLite gives a database's -wal and -shm files the database file's mode, so a
database file made here before SQLite opens it keeps all three private.
"""
from __future__ import annotations

import os
from pathlib import Path

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


def make_private_dirs(directory: str | Path, *, parent_made: bool = False) -> None:
    """`Path(directory).mkdir(parents=True, exist_ok=True)`, with every directory it makes
    0700 (`mkdir` gives the parents it makes the umask's mode) and the same errors. A
    directory still "not found" once its parent is there (a parent that refuses children,
    as /proc does) is that error, raised once (not tried again)."""
    directory = Path(directory)
    try:
        directory.mkdir(mode=PRIVATE_DIR_MODE)
    except FileNotFoundError:
        if parent_made or directory.parent == directory:
            raise
        make_private_dirs(directory.parent)
        make_private_dirs(directory, parent_made=True)
    except OSError:
        if not directory.is_dir():   # as mkdir's exist_ok: a file there is an error
            raise


def create_private_file(path: str | Path) -> bool:
    """Make `path` an empty private file when nothing is there (True); leave whatever is
    there as it is (False). Its directory must exist.

    NOTE: no descriptor of an existing file is opened (and closed): closing one drops
    every POSIX lock this process holds on the file, SQLite's included."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def private_opener(path: str | Path, flags: int) -> int:
    """An `opener` for `open()`: a file it makes is private (one already there keeps its
    mode): `open(path, "wb", opener=private_opener)`."""
    return os.open(path, flags, PRIVATE_FILE_MODE)
