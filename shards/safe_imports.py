"""Processes this one starts import our packages from where they are installed, never
from the current directory.

multiprocessing starts its fork server (and a spawned child) as `python -c ...`, and
`-c` puts the current directory first on the import path; Python 3.11's fork server never
applies the parent's path. A `cache.py` or a `shards/` in the directory the gateway was
started from then shadowed our packages in every worker: the start failed, or that
directory's code ran in the processes holding every tenant's prompts. `PYTHONSAFEPATH`
(Python 3.11's `-P`) leaves the directory off the path of the interpreters started meanwhile.

Invariant: this process's environment carries the variable only while
`no_working_directory_imports` is entered, and is restored as it was after; a process
started meanwhile may keep it (harmless: it only keeps the directory off the import path
of the interpreters that process starts).
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

SAFE_PATH = "PYTHONSAFEPATH"


@contextmanager
def no_working_directory_imports() -> Iterator[None]:
    """Interpreters started inside (the fork server, a spawned child) leave the current
    directory off their import path."""
    previous = os.environ.get(SAFE_PATH)
    os.environ[SAFE_PATH] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(SAFE_PATH, None)
        else:
            os.environ[SAFE_PATH] = previous
