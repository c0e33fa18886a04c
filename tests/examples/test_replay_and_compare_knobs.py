"""examples/replay_and_compare.sh refuses a numeric knob (HOT_BLOCKS, TENANTS, SESSIONS, SEED,
SPEED, MAX_INPUT_TOKENS) that is no number in its range with one line and exit status 2
before it does anything, as it does a bad PORT (QA219 F2: HOT_BLOCKS=abc was a Python
traceback, exit 1, after the workload was generated); good values get past the check."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "replay_and_compare.sh"


def _run(tmp_path: Path, **knobs: str) -> subprocess.CompletedProcess:
    # a `stepahead` that exits 99 if the script gets as far as generating a workload
    (tmp_path / "stepahead").write_text("#!/bin/sh\necho 'stepahead ran' >&2\nexit 99\n")
    (tmp_path / "stepahead").chmod(0o755)
    env = {key: value for key, value in os.environ.items()
           if key not in ("TENANTS", "SESSIONS", "SEED", "SPEED", "HOT_BLOCKS", "MAX_INPUT_TOKENS", "TRACE")}
    env.update(MODEL="tiny", PORT="1", PATH=f"{tmp_path}:{os.environ['PATH']}", **knobs)
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize(("knob", "value", "least"), [
    ("HOT_BLOCKS", "abc", 1), ("HOT_BLOCKS", "0", 1), ("HOT_BLOCKS", "-5", 1), ("HOT_BLOCKS", "1.5", 1),
    ("HOT_BLOCKS", "99999999999999999999", 1), ("TENANTS", "0", 1),
    ("SESSIONS", "two", 1), ("SEED", "-1", 0), ("MAX_INPUT_TOKENS", "0", 1), ("MAX_INPUT_TOKENS", "1k", 1)])
def test_a_bad_whole_number_knob_is_one_line_before_anything_runs(tmp_path, knob, value, least):
    done = _run(tmp_path, **{knob: value})
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"replay_and_compare: {knob} must be a whole number of at least {least}, got '{value}'\n"


@pytest.mark.parametrize("speed", ["0", "0.0", "-2", "abc", "inf", "1e3", "."])
def test_a_bad_speed_is_one_line_before_anything_runs(tmp_path, speed):
    done = _run(tmp_path, SPEED=speed)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("replay_and_compare: SPEED must be a positive number (2 replays twice as fast), "
                           f"got '{speed}'\n")


def test_good_knobs_get_as_far_as_generating_the_workload(tmp_path):
    done = _run(tmp_path, HOT_BLOCKS="010", TENANTS="1", SESSIONS="1", SEED="0", SPEED="0.5",
                MAX_INPUT_TOKENS="512")
    assert (done.returncode, done.stderr) == (99, "stepahead ran\n")
