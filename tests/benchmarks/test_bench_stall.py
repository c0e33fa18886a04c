"""bench_stall on the tiny model: all three settings measured, ratios from the medians."""
from __future__ import annotations

import json

from tests.benchmarks.in_process import run_benchmark


def test_bench_stall_reports_every_setting_and_the_ratios():
    out = run_benchmark("bench_stall", "--model", "tiny", "--streams", "2", "--stream-tokens", "120",
                        "--newcomers", "2", "--prompt-tokens", "300", "--gap-s", "0.05", "--repeats", "1",
                        "--stall-s", "0")
    (row,) = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    first = row["prefill_first"]
    for name in ("prefill_first", "bound_rides", "bound_passes"):
        setting = row[name]
        assert setting["num_gaps"] > 0
        assert 0 < setting["itl_p50_s"] <= setting["itl_p99_s"] <= setting["itl_max_s"]
        assert 0 < setting["ttft_p50_s"] <= setting["ttft_max_s"]
    for name in ("bound_rides", "bound_passes"):
        other = row[name]
        for key, ratio in ((f"itl_p99_first_over_{name}", first["itl_p99_s"] / other["itl_p99_s"]),
                           (f"ttft_mean_{name}_over_first", other["ttft_mean_s"] / first["ttft_mean_s"])):
            assert abs(row[key] - ratio) <= 0.01 * ratio + 1e-3
