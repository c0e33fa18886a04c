"""bench_stall on the tiny model: both settings measured, ratios from the medians."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_stall.py"


def test_bench_stall_reports_both_settings_and_their_ratios():
    out = subprocess.run([sys.executable, str(SCRIPT), "--model", "tiny", "--streams", "2", "--stream-tokens", "120",
                          "--newcomers", "2", "--prompt-tokens", "300", "--gap-s", "0.05", "--repeats", "1",
                          "--stall-s", "0"],
                         check=True, capture_output=True, text=True, timeout=240).stdout
    (row,) = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    first, bound = row["prefill_first"], row["stall_bound"]
    for setting in (first, bound):
        assert setting["num_gaps"] > 0
        assert 0 < setting["itl_p50_s"] <= setting["itl_p99_s"] <= setting["itl_max_s"]
        assert 0 < setting["ttft_p50_s"] <= setting["ttft_max_s"]
    for key, ratio in (("itl_p99_first_over_bound", first["itl_p99_s"] / bound["itl_p99_s"]),
                       ("ttft_mean_bound_over_first", bound["ttft_mean_s"] / first["ttft_mean_s"])):
        assert abs(row[key] - ratio) <= 0.01 * ratio + 1e-3
