"""benchmarks/bench_checkpoints.py end to end on a few tenants: the full save writes
every tenant and the global model, the incremental one only the tenants that stepped."""
from __future__ import annotations

import json

from tests.benchmarks.in_process import run_benchmark


def test_a_small_run_reports_both_saves_and_what_each_wrote():
    out = run_benchmark("bench_checkpoints", "--tenants", "40", "--changed-share", "0.1", "--repeats", "2")
    result = json.loads(out.strip().splitlines()[-1])
    assert result["full"]["files_written"] == 41        # every tenant and the global model
    assert result["incremental"]["files_written"] == 4  # the 10 % that took a step
    assert result["full"]["save_s_median"] > 0 and result["incremental"]["save_s_median"] > 0
    assert result["ratios"]["full_over_incremental_save_s"] > 0
