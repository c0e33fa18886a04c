"""benchmarks/bench_gateway_cpu.py end to end, one short round: a revision checked out in a
worktree (removed afterwards, with its temporary directory) serves the LiteLLM path and reports
a positive CPU time per request (the gateway warmed with a few requests, not 480: the
figures' values are not what is checked). One gateway: a source directory (`--trees`) is
served the same way, without the worktree."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_gateway_cpu.py"


def worktrees() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True).stdout


def test_one_round_of_a_revision_on_the_litellm_path(tmp_path):
    before = worktrees()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run([sys.executable, str(SCRIPT), "--revs", "HEAD", "--path", "litellm", "--rounds", "1",
                           "--requests", "24", "--concurrency", "4", "--warmup", "4"], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, TMPDIR=str(scratch)))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    side = result["trees"]["HEAD"]
    assert len(side["rounds"]) == 1 and side["cpu_us_per_request_median"] > 0
    assert side["rounds"][0]["p99_ms"] >= side["rounds"][0]["p50_ms"] >= 20.0  # the upstream's own 20 ms
    assert result["path"] == "litellm" and result["cpu_ratio_last_over_first"] == 1.0 and worktrees() == before
    assert list(scratch.iterdir()) == []  # the worktree's directory and the servers' scratch are gone


def test_revisions_or_trees_are_required():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--revs" in done.stderr
