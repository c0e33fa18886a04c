"""The bytes of an upload while they are written (`gateway.file_store`): `root/<id>.partial`,
locked (`flock`) by their writer until the file's record exists and they are renamed
`root/<id>`, and what a start does with those a killed gateway left.

Invariant: `sweep_partial_files` never touches a partial file a live writer holds (of this
gateway or of another sharing `root`), nor an empty one made in the last `PARTIAL_GRACE_S`
(its writer may not have locked it yet); it renames into place one whose record exists
and removes the others.
"""
from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path

PARTIAL_SUFFIX = ".partial"
PARTIAL_GRACE_S = 60   # an empty partial file younger than this may not be locked by its writer yet


def partial_path(root: Path, file_id: str) -> Path:
    return root / f"{file_id}{PARTIAL_SUFFIX}"


def lock_while_written(stream) -> None:
    """Hold the partial file `stream` is writing until it is closed: sweeps skip it."""
    fcntl.flock(stream, fcntl.LOCK_EX | fcntl.LOCK_NB)


def sweep_partial_files(root: Path, has_record: Callable[[str], bool]) -> int:
    """Remove the partial files under `root` whose writer died before their record (a kill
    -9 mid-upload), rename into place those whose writer died after it; the number removed."""
    if not root.is_dir():
        return 0
    removed = 0
    for partial in root.glob(f"file-*{PARTIAL_SUFFIX}"):
        file_id = partial.name.removesuffix(PARTIAL_SUFFIX)
        try:
            with open(partial, "rb") as held:
                found = os.fstat(held.fileno())
                if found.st_size == 0 and time.time() - found.st_mtime < PARTIAL_GRACE_S:
                    continue
                try:
                    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue   # its upload is being written
                if has_record(file_id):
                    os.replace(partial, root / file_id)
                else:
                    partial.unlink()
                    removed += 1
        except FileNotFoundError:   # its writer (or another gateway's sweep) finished with it meanwhile
            continue
    return removed
