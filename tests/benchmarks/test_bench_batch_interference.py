"""benchmarks/bench_batch_interference.py on the tiny model, small: every mode runs and
the summary compares them."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_batch_interference.py"


def test_the_benchmark_runs_each_mode_and_reports_ratios():
    done = subprocess.run([sys.executable, str(BENCH), "--model", "tiny", "--steps", "2", "--batch-requests", "3",
                           "--batch-tokens", "8", "--think-s", "0.05", "--modes", "batch_no_yield,batch_flex"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    summary = out["summary"]
    modes = {"batch_no_yield", "batch_flex"}
    assert set(summary["ttft_mean_over_alone"]) == set(summary["batch_s_over_first"]) == modes
    assert {summary[mode]["batch_completed"] for mode in modes} == {3}
    assert summary["alone"]["ttft_mean_s"] > 0 and summary["batch_s_over_first"]["batch_no_yield"] == 1
