"""A command whose reader of stdout goes away (`stepahead traces stats --json | head -c 300`,
`python -m cache.sim ... | head`) ends quietly, as Unix tools do; one whose stdout fails
otherwise (a full disk: `> /dev/full`; a closed stdout: `>&-`) ends with one line on
stderr. Here in cache/, which imports nothing of ours, so every command line
(gateway/cli.py, cache/sim) shares it.

Invariants: when writing to stdout fails with BrokenPipeError, the command stops and exits
with status 141 (128 + SIGPIPE, what a shell reports for `yes | head`), printing nothing
more; when it fails with another OSError (stdout closed counts as one, and only when
something is written to it), the command stops and exits with status 74 (EX_IOERR of
sysexits.h) after one line, "PROGRAM: cannot write to stdout: WHY", on stderr. Neither
prints a traceback, nor an "Exception ignored ..." at interpreter exit: stdout is pointed
at os.devnull, where the exit's flush of what is still buffered cannot fail. Only errors
of stdout's own writes count so: an OSError of anything else the command does passes
through unchanged.
NOTE: Python ignores SIGPIPE, so a write to a closed pipe raises instead of killing the
process; the command's output is flushed inside `quiet_when_reader_leaves` so that even a
last short write fails there, not at exit.
"""
from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

READER_LEFT_EXIT = 128 + 13   # 128 + SIGPIPE
STDOUT_FAILED_EXIT = 74       # EX_IOERR
INTERRUPTED_EXIT = 128 + 2    # 128 + SIGINT, what a shell reports for a command stopped by Ctrl+C


class StdoutFailed(OSError):
    """A write to stdout failed, other than by its reader leaving."""


class _GuardedStdout:
    """stdout (None when the process started with it closed) whose write and flush
    failures are StdoutFailed; anything else is stdout's own."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        if self.stream is None:
            if text:
                raise StdoutFailed(errno.EBADF, "stdout is closed")
            return 0
        return _guarded(self.stream.write, text)

    def flush(self) -> None:
        if self.stream is not None:
            _guarded(self.stream.flush)

    def __getattr__(self, name: str):
        if self.stream is None:
            raise AttributeError(name)
        return getattr(self.stream, name)


def _guarded(call: Callable, *args):
    """`call(*args)`, an OSError of it other than BrokenPipeError raised as StdoutFailed."""
    try:
        return call(*args)
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise StdoutFailed(exc.errno, exc.strerror or str(exc)) from exc


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


def quiet_when_reader_leaves(command: Callable[[], int], program: str = "stepahead") -> int:
    """`command()`'s exit code, with stdout flushed; READER_LEFT_EXIT if stdout's reader
    went away meanwhile, STDOUT_FAILED_EXIT (said on stderr, as `program`) if stdout
    failed otherwise."""
    guarded = _GuardedStdout(sys.stdout)
    sys.stdout = guarded
    try:
        code = command()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        _restore_stdout(guarded)
        _point_stdout_at_devnull()
        return READER_LEFT_EXIT
    except StdoutFailed as exc:
        _restore_stdout(guarded)
        _point_stdout_at_devnull()
        print(f"{program}: cannot write to stdout: {exc.strerror}", file=sys.stderr)
        return STDOUT_FAILED_EXIT
    finally:
        _restore_stdout(guarded)


def run_command(command: Callable[[], int], program: str = "stepahead") -> int:
    """`quiet_when_reader_leaves(command, program)`, and a Ctrl+C the command does not stop
    on by itself (KeyboardInterrupt) ends it with one line, "`program`: stopped", and
    INTERRUPTED_EXIT: how every command line of ours ends (gateway/cli.py, cache/sim,
    agents_trace/predict's eval and timing)."""
    try:
        return quiet_when_reader_leaves(command, program=program)
    except KeyboardInterrupt:
        return _stopped(program)


@contextmanager
def stopped_while_loading(module_name: str, program: str) -> Iterator[None]:
    """Around the imports of a command's module run as `python -m` (`module_name` is its
    `__name__`): a Ctrl+C while they load (numpy, the predictor: half a second) ends it as
    one later on does, with one line and INTERRUPTED_EXIT, not a traceback. Imported as a
    library (any other `module_name`), the KeyboardInterrupt passes through."""
    try:
        yield
    except KeyboardInterrupt:
        if module_name != "__main__":
            raise
        raise SystemExit(_stopped(program)) from None


def _stopped(program: str) -> int:
    print(f"{program}: stopped", file=sys.stderr)
    return INTERRUPTED_EXIT


def _restore_stdout(guarded: _GuardedStdout) -> None:
    """stdout back as it was, unless the command replaced it meanwhile."""
    if sys.stdout is guarded:
        sys.stdout = guarded.stream
