"""bench_prefill_order on the tiny model: both orders replay the same steps; ratios from the medians."""
from __future__ import annotations

import json

from tests.benchmarks.in_process import run_benchmark


def test_bench_prefill_order_reports_both_orders_and_the_ratios():
    out = run_benchmark("bench_prefill_order", "--model", "tiny", "--steps", "8", "--rate", "80",
                        "--cold-share", "0.5", "--cold-tokens", "400", "--sessions", "2",
                        "--warm-prefix-tokens", "200", "--warm-new-tokens", "32", "--repeats", "1")
    (row,) = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    for order in ("deadline", "arrival"):
        figures = row[order]
        assert figures["num_warm"] + figures["num_cold"] == 8 and figures["num_warm"] > 0
        assert 0 < figures["ttft_p50_s"] <= figures["ttft_p99_s"] and figures["ttft_mean_s"] > 0
    ratio = row["arrival"]["ttft_mean_s"] / row["deadline"]["ttft_mean_s"]
    assert abs(row["arrival_over_deadline_ttft_mean_s"] - ratio) <= 0.01 * ratio + 1e-3
    assert row["arrival_over_deadline_ttft_mean_per_repeat"] and row["steps"] == 8
