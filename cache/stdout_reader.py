"""A command whose reader of stdout goes away (`stepahead traces stats --json | head -c 300`,
`python -m cache.sim ... | head`) ends quietly, as Unix tools do. Here in cache/, which
imports nothing of ours, so every command line (gateway/cli.py, cache/sim) shares it.

Invariant: when writing to stdout fails with BrokenPipeError, the command stops and exits
with status 141 (128 + SIGPIPE, what a shell reports for `yes | head`), printing nothing
more: no traceback, and no "Exception ignored ... BrokenPipeError" at interpreter exit,
because stdout is pointed at os.devnull, where the exit's flush of what is still buffered
cannot fail.
NOTE: Python ignores SIGPIPE, so a write to a closed pipe raises instead of killing the
process; the command's output is flushed inside `quiet_when_reader_leaves` so that even a
last short write fails there, not at exit.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable

READER_LEFT_EXIT = 128 + 13   # 128 + SIGPIPE


def _point_stdout_at_devnull() -> None:
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):   # a replaced stdout (a test's capture) has none
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, descriptor)
    finally:
        os.close(devnull)


def quiet_when_reader_leaves(command: Callable[[], int]) -> int:
    """`command()`'s exit code, with stdout flushed; READER_LEFT_EXIT if stdout's reader
    went away meanwhile."""
    try:
        code = command()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        _point_stdout_at_devnull()
        return READER_LEFT_EXIT
