"""benchmarks/bench_gateway_cpu.py end to end, one short round: a revision checked out in a
worktree (removed afterwards, with its temporary directory) and a source directory both serve, and each reports a
positive CPU time per request (each gateway warmed with a few requests, not 480: the
figures' values are not what is checked)."""
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


def test_one_round_of_a_revision_and_a_tree(tmp_path):
    before = worktrees()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run([sys.executable, str(SCRIPT), "--revs", "HEAD", "--rounds", "1", "--requests", "48",
                           "--concurrency", "4", "--warmup", "8"], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TMPDIR=str(scratch)))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    side = result["trees"]["HEAD"]
    assert len(side["rounds"]) == 1 and side["cpu_us_per_request_median"] > 0
    assert side["rounds"][0]["p99_ms"] >= side["rounds"][0]["p50_ms"] >= 20.0  # the upstream's own 20 ms
    assert result["cpu_ratio_last_over_first"] == 1.0 and worktrees() == before
    assert list(scratch.iterdir()) == []  # the worktree's directory and the servers' scratch are gone

    done = subprocess.run([sys.executable, str(SCRIPT), "--trees", str(ROOT), "--path", "litellm", "--rounds", "1",
                           "--requests", "32", "--concurrency", "4", "--warmup", "8"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["path"] == "litellm" and result["trees"][str(ROOT)]["cpu_us_per_request_median"] > 0


def test_revisions_or_trees_are_required():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--revs" in done.stderr
