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
of the interpreters that process starts). Threads enter it one at a time (`_ENTERED`): the
gateway starts processes from several (a worker's restart, the fork-server watch, start-up
checks), and one leaving must not take the variable away while another still starts an
interpreter, nor restore a value another set (which would keep it for good).
"""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SAFE_PATH = "PYTHONSAFEPATH"
_ENTERED = threading.RLock()   # held while inside: one thread at a time (re-entrant for nesting)


@contextmanager
def no_working_directory_imports() -> Iterator[None]:
    """Interpreters started inside (the fork server, a spawned child) leave the current
    directory off their import path."""
    with _ENTERED:
        previous = os.environ.get(SAFE_PATH)
        os.environ[SAFE_PATH] = "1"
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop(SAFE_PATH, None)
            else:
                os.environ[SAFE_PATH] = previous
