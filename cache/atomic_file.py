"""Writing a file whole or not at all.

Invariant: while `replacing(path)` is open, `path` keeps its old content (or stays
absent); the new content appears under `path` only if the block ends without an
exception (a rename of a partial file beside it, atomic on one file system). On any
exception, Ctrl+C included, the partial file is removed and nothing else changes. The
partial file is this process's own, so two processes writing one file (two gateways
sharing a directory) each put a whole copy in place, the last one staying.

Errors: a path it cannot replace (empty, a directory, `.` or `/`, a missing folder, no
permission) is an OSError whose `filename` is `path` as given, never the partial file's
name, raised before the block runs; callers catch OSError alone.

Modes: a file replaced keeps its mode; a new one is private to this user, 0600 whatever
the umask (`cache.private_paths`: what is written so is mostly tenants' data), unless
`shared`.
"""
from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from cache.private_paths import PRIVATE_FILE_MODE


@contextmanager
def replacing(path: str | Path, binary: bool = False, *, shared: bool = False) -> Iterator[IO]:
    """A stream (text, UTF-8; or bytes) whose content replaces `path` when the block ends
    normally. `shared`: a new file gets the mode the umask gives new files, not the private
    one (for what other users may read: the cache directory's files)."""
    target = _replaceable(path)
    partial = target.with_name(f".{target.name}.partial{os.getpid()}")
    kept = _mode_of(target)
    mode = 0o666 if shared else PRIVATE_FILE_MODE   # the umask applies

    def opener(name: str, flags: int) -> int:
        return os.open(name, flags, mode)

    try:
        stream = open(partial, "wb", opener=opener) if binary else open(partial, "w", encoding="utf-8",
                                                                        opener=opener)
    except OSError as exc:
        raise _naming(exc, path) from None
    try:
        with stream:
            if kept is not None or not shared:   # (also over a partial file an earlier process of this pid left)
                os.fchmod(stream.fileno(), PRIVATE_FILE_MODE if kept is None else kept)
            yield stream
        try:
            os.replace(partial, target)
        except OSError as exc:
            raise _naming(exc, path) from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _replaceable(path: str | Path) -> Path:
    """`path` as a Path, or an OSError naming it when it names no file that could be
    replaced: empty, or a directory (`.`, `..`, `/` and `name/` among them)."""
    if str(path) == "":
        raise FileNotFoundError(errno.ENOENT, "an empty path names no file", "")
    target = Path(path)
    if target.name in ("", ".", "..") or str(path).endswith(os.sep) or target.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    return target


def _naming(exc: OSError, path: str | Path) -> OSError:
    """`exc` with the user's `path` as its file name instead of the partial file's."""
    return OSError(exc.errno, exc.strerror, str(path)) if exc.errno is not None else exc   # its subclass, by errno


def _mode_of(path: Path) -> int | None:
    """The permission bits of `path`, None when there is none."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return None
