"""stdout_reader: a command whose reader of stdout goes away exits 141 without a word."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cache.stdout_reader import READER_LEFT_EXIT, quiet_when_reader_leaves

# prints a short line and a long one (past any buffer), then says it got to its end
SCRIPT = """
import sys
from cache.stdout_reader import quiet_when_reader_leaves
def command():
    print("short")
    print("x" * 200_000)
    return 3
code = quiet_when_reader_leaves(command)
print("returned", code, file=sys.stderr)
sys.exit(code)
"""


def _run_into_a_closed_pipe(script: str, *, buffered: bool) -> subprocess.CompletedProcess:
    """`script` with its stdout a pipe whose reader is gone before it starts."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-c", script], stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=60, env=env)
    finally:
        os.close(write_end)


def test_stdout_reader_passes_the_commands_exit_code_and_output_through(capsys):
    assert quiet_when_reader_leaves(lambda: print("hello") or 3) == 3
    assert capsys.readouterr().out == "hello\n"


@pytest.mark.parametrize("buffered", [False, True], ids=["unbuffered", "buffered"])
def test_stdout_reader_a_closed_pipe_is_exit_141_and_no_traceback(buffered):
    done = _run_into_a_closed_pipe(SCRIPT, buffered=buffered)
    assert READER_LEFT_EXIT == 141
    assert (done.returncode, done.stderr) == (141, "returned 141\n")   # nothing at exit either


def test_stdout_reader_a_short_write_fails_inside_it_not_at_exit():
    """Buffered, a short line is only written by the flush: that flush is the wrapper's."""
    script = SCRIPT.replace('    print("x" * 200_000)\n', "")
    done = _run_into_a_closed_pipe(script, buffered=True)
    assert (done.returncode, done.stderr) == (141, "returned 141\n")
