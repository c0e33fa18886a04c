"""Where `stepahead traces export` writes its lines: stdout (no `-o`, or `-o -`), or the
file `-o` names, written whole or not at all (`cache.atomic_file.replacing`: a regular
file or a new one is replaced by a rename; a device, a FIFO or `/dev/stdout` is written
into; a symlink's target is what is replaced).

Invariant: an output that is the trace store being read, or one of SQLite's files beside
it (`-wal`, `-shm`, `-journal`), is refused before anything is read or written, by its
name resolved and by its file's identity (device and inode, so a link or a second name
counts too): the store is never overwritten by its own export.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from agents_trace.traces_lookup import CommandError
from cache.atomic_file import replacing

STDOUT_NAME = "-"
STORE_FILE_SUFFIXES = ("", "-wal", "-shm", "-journal")   # the store and SQLite's files beside it


def _identity(path: Path) -> tuple[int, int] | None:
    """The file's (device, inode), following links; None when there is none."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def refuse_the_store(output: str | None, store: Path) -> None:
    """CommandError (exit 2) when `output` names the store `store` or a file of it."""
    if not output or output == STDOUT_NAME:
        return
    store_files = [Path(f"{store}{suffix}") for suffix in STORE_FILE_SUFFIXES]
    named = os.path.realpath(output)
    same_name = any(named == os.path.realpath(file) for file in store_files)
    identity = _identity(Path(output))
    same_file = identity is not None and identity in {_identity(file) for file in store_files}
    if same_name or same_file:
        raise CommandError(f"cannot write {output}: it is the trace store being read ({store}); "
                           "name another file", 2)


def _write_to(stream: TextIO, lines: Iterable[str]) -> int:
    count = 0
    for line in lines:
        stream.write(line)
        count += 1
    return count


def write_lines(lines: Iterable[str], output: str | None) -> int:
    """The lines to stdout, or to `output` (see above). Returns how many lines."""
    if not output or output == STDOUT_NAME:
        count = _write_to(sys.stdout, lines)
        sys.stdout.flush()   # a reader gone fails here, before anything says they were written
        return count
    try:
        with replacing(output, shared=True) as out:   # the file asked for: the umask's mode, as `> file` gives
            return _write_to(out, lines)
    except BrokenPipeError:   # a FIFO's or /dev/stdout's reader gone: as for stdout, a quiet exit 141
        raise
    except OSError as exc:
        raise CommandError(f"cannot write {output}: {exc.strerror or exc}", 2) from None
