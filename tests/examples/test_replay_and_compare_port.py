"""examples/replay_and_compare.sh refuses a PORT that is no port number (not digits, or
outside 1 to 65535) with one line and exit status 2 before it does anything (generates a
workload, starts a gateway): it once printed a Python traceback, after the workload."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "replay_and_compare.sh"


@pytest.mark.parametrize("port", ["abc", "70000", "0", "-1", "99999999999999999999", "80 ", "1e3"])
def test_a_port_that_is_no_port_number_is_one_line_before_anything_runs(tmp_path, port):
    env = dict(os.environ, PORT=port, MODEL="tiny", SESSIONS="1", PATH=f"{tmp_path}:{os.environ['PATH']}")
    # a `stepahead` that fails the test if the script gets as far as generating a workload
    (tmp_path / "stepahead").write_text("#!/bin/sh\necho 'stepahead ran' >&2\nexit 99\n")
    (tmp_path / "stepahead").chmod(0o755)
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60, env=env)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"replay_and_compare: PORT must be a port number from 1 to 65535, got '{port}'\n"
