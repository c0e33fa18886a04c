"""A directory that one gateway process at a time writes: the first to claim it holds an
advisory lock (`flock`) on `CLAIM_FILE` inside it until it releases the claim or exits;
another process that tries learns that it is held, and by which process id.

Invariants: while a claim is held, no other process's `claim_directory` on the same
directory (on this host) holds; the lock dies with its process, so a gateway that was
killed leaves no stale claim behind (the process id left in the file is only read while
the lock is held, so it names a live holder). `flock` is reliable on one host, not across
NFS.
"""
from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from cache.private_paths import make_private_dirs, private_opener

CLAIM_FILE = ".writer.lock"


@dataclass(slots=True)
class DirectoryClaim:
    """The outcome of `claim_directory`: `held` by this process (then `release()` it), or
    held by another process, `holder_pid` when it wrote its id."""

    directory: Path
    held: bool
    holder_pid: int | None = None
    _lock_file: IO[str] | None = field(default=None, repr=False)

    def release(self) -> None:
        """Give the directory up (once; nothing when it was not held)."""
        if self._lock_file is not None:
            self._lock_file.close()   # closing the file drops its lock
            self._lock_file = None
            self.held = False


def claim_directory(directory: Path) -> DirectoryClaim:
    """Claim `directory` (made when missing, private: cache/private_paths.py) for this
    process, without waiting."""
    make_private_dirs(directory)
    return claim_lock_file(directory / CLAIM_FILE)


def claim_lock_file(lock_path: Path) -> DirectoryClaim:
    """Claim what `lock_path` (made when missing; its directory must exist, and names the
    claim) stands for, without waiting. A claim whose process id cannot be written (a full
    disk) raises and holds nothing, so a later try can succeed."""
    lock_file = open(lock_path, "a+", encoding="utf-8", opener=private_opener)   # private, as the directories made for it
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock_file.seek(0)
        text = lock_file.read().strip()
        lock_file.close()
        return DirectoryClaim(lock_path.parent, held=False, holder_pid=int(text) if text.isdigit() else None)
    try:
        lock_file.seek(0)
        lock_file.truncate()
        lock_file.write(f"{os.getpid()}\n")
        lock_file.flush()
    except BaseException:   # a full disk: no claim, and the lock goes with the file (not kept
        lock_file.close()   # alive by the error's traceback, which would hold it from this process too)
        raise
    return DirectoryClaim(lock_path.parent, held=True, _lock_file=lock_file)
