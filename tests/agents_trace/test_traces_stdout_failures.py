"""A `stepahead traces` command whose stdout fails other than by its reader leaving (closed,
`>&-`; a full device, `> /dev/full`) says so in one line and exits 74, no traceback."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session


@pytest.fixture
def store(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    run_scripted_session(tracer, clock, headers={"x-session-id": "only"})
    tracer.stop()
    return tmp_path / "traces.sqlite3"


def _traces(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway.cli", "traces", *argv], stderr=subprocess.PIPE,
                          text=True, timeout=120, **kwargs)


def test_traces_stats_with_stdout_closed_is_one_line_and_exit_74(store):
    done = _traces(["stats", "--db", str(store)], preexec_fn=lambda: os.close(1))
    assert (done.returncode, done.stderr) == (74, "stepahead: cannot write to stdout: stdout is closed\n")


def test_traces_list_into_a_full_device_is_one_line_and_exit_74(store, tmp_path):
    full = tmp_path / "full"   # a node of /dev/full's device, made here
    try:
        os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    except PermissionError:
        pytest.skip("making a device node needs root")
    with open(full, "w") as stdout:
        done = _traces(["list", "--db", str(store)], stdout=stdout)
    assert (done.returncode, done.stderr) == (74, "stepahead: cannot write to stdout: No space left on device\n")
