"""Writing a file whole or not at all.

Invariant: while `replacing(path)` is open, a regular file `path` keeps its old content
(a new one stays absent); the new content appears under `path` only if the block ends without an
exception (a rename of a partial file beside it, atomic on one file system). On any
exception, Ctrl+C included, the partial file is removed and nothing else changes. The
partial file is this process's own, so two processes writing one file (two gateways
sharing a directory) each put a whole copy in place, the last one staying.

What is replaced is a regular file, or a new one: a symlink's target (resolved, the
partial file beside it), never the link itself. A path naming something else is written
into, as `> path` does, never replaced: a character device (`/dev/null`, a terminal), a
FIFO, or a file reached through /proc (`/dev/stdout`, `/dev/fd/N`: an open descriptor's
file, whose writer keeps its descriptor). There "whole or not at all" cannot hold: what
was written before a failure stays written.

Errors: a path it cannot replace (empty, a directory, `.` or `/`, a missing folder, no
permission) is an OSError whose `filename` is `path` as given, never the partial file's
name, raised before the block runs; callers catch OSError alone.

Modes: a file replaced keeps its mode; a new one is private to this user, 0600 whatever
the umask (`cache.private_paths`: what is written so is mostly tenants' data), unless
`shared`.

A process killed mid-write leaves its partial file, `.<name>.partial<pid>`:
`sweep_partial_files(directory)` removes those of a directory whose pid names no live
process but this one (so one of its own pid, left by an earlier process: containers
reuse pids). Call it only where no write of this process is in flight, on a directory
this process holds (`gateway.directory_claim`: no other gateway saves there).
"""
from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from cache.private_paths import PRIVATE_FILE_MODE
from cache.process_state import process_runs

MAX_LINKS = 40   # links followed before a path counts as a loop (as the kernel's)
PARTIAL_NAME = re.compile(r"\..+\.partial([0-9]+)")   # `.<name>.partial<pid>` (`partial_path`)


def partial_path(target: Path) -> Path:
    """Where this process writes `target`'s new content before renaming it into place."""
    return target.with_name(f".{target.name}.partial{os.getpid()}")


def sweep_partial_files(directory: str | Path) -> int:
    """Remove the partial files (`.<name>.partial<pid>`) in `directory` left by a process
    killed mid-write (see the module's docstring); how many. Call only where no write of
    this process is in flight: one of its own pid counts as left by an earlier process."""
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return 0
    for entry in entries:
        found = PARTIAL_NAME.fullmatch(entry.name)
        pid = None if found is None else int(found.group(1))
        if pid is None or (pid != os.getpid() and process_runs(pid)):   # another's, still writing
            continue
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            os.unlink(entry.path)
        except FileNotFoundError:   # removed meanwhile
            continue
        removed += 1
    return removed


@contextmanager
def replacing(path: str | Path, binary: bool = False, *, shared: bool = False) -> Iterator[IO]:
    """A stream (text, UTF-8; or bytes) whose content replaces `path` when the block ends
    normally. `shared`: a new file gets the mode the umask gives new files, not the private
    one (for what other users may read: the cache directory's files)."""
    target = _replaceable(path)
    if _written_in_place(target):
        with _writing_into(target, path, binary) as stream:
            yield stream
        return
    target = _link_target(target, path)
    partial = partial_path(target)
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


def _written_in_place(target: Path) -> bool:
    """Whether `target` names something to write into rather than replace: not a regular
    file (a device, a FIFO), or a file reached through /proc (an open descriptor's)."""
    try:
        info = target.stat()
    except OSError:   # missing (a new file), or unreadable: replacing says why, naming it
        return False
    return not stat.S_ISREG(info.st_mode) or _reached_through_proc(target)


def _reached_through_proc(path: Path) -> bool:
    """Whether `path`, or a link it leads through, lies in /proc (`/dev/stdout` is a link
    to `/proc/self/fd/1`, whose own "link" names the descriptor's file)."""
    current = Path(os.path.abspath(path))
    for _ in range(MAX_LINKS):
        if Path(os.path.realpath(current.parent)).parts[1:2] == ("proc",):
            return True
        if not current.is_symlink():
            return False
        current = Path(os.path.abspath(current.parent / os.readlink(current)))
    return False


def _link_target(target: Path, path: str | Path) -> Path:
    """The file a symlink `target` leads to (`target` itself when it is none), which is
    what gets replaced; ELOOP naming `path` for a loop of links."""
    if not target.is_symlink():
        return target
    resolved = Path(os.path.realpath(target))
    if resolved.is_symlink():
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
    return resolved


@contextmanager
def _writing_into(target: Path, path: str | Path, binary: bool) -> Iterator[IO]:
    """A stream written straight into `target` (emptied first where it is a file, as `>`
    does), every failure an OSError naming `path`."""
    try:
        descriptor = os.open(target, os.O_WRONLY | os.O_TRUNC)
    except OSError as exc:
        raise _naming(exc, path) from None
    stream = open(descriptor, "wb") if binary else open(descriptor, "w", encoding="utf-8")
    try:
        yield stream
    except BaseException:
        with suppress(OSError):   # what is still buffered may fail too: the block's error is the one
            stream.close()
        raise
    try:
        stream.close()   # the last flush (`/dev/full` fails here)
    except OSError as exc:
        raise _naming(exc, path) from None
