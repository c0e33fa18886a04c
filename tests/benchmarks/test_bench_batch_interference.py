"""benchmarks/bench_batch_interference.py on the tiny model, small (run in this process; each
mode's gateway is still a process of its own): every mode runs and the summary compares them."""
from __future__ import annotations

import json

from tests.benchmarks.in_process import run_benchmark


def test_the_benchmark_runs_each_mode_and_reports_ratios():
    out = run_benchmark("bench_batch_interference", "--model", "tiny", "--steps", "2", "--batch-requests", "3",
                        "--batch-tokens", "8", "--think-s", "0.05", "--modes", "batch_no_yield,batch_flex")
    summary = json.loads(out.strip().splitlines()[-1])["summary"]
    modes = {"batch_no_yield", "batch_flex"}
    assert set(summary["ttft_mean_over_alone"]) == set(summary["batch_s_over_first"]) == modes
    assert {summary[mode]["batch_completed"] for mode in modes} == {3}
    assert summary["alone"]["ttft_mean_s"] > 0 and summary["batch_s_over_first"]["batch_no_yield"] == 1
    for mode in modes:   # each ratio from both of its sides (the script rounds it to 3 places)
        over_alone = summary[mode]["ttft_mean_s"] / summary["alone"]["ttft_mean_s"]
        assert abs(summary["ttft_mean_over_alone"][mode] - over_alone) <= 0.001 * over_alone + 0.001
        over_first = summary[mode]["batch_s"] / summary["batch_no_yield"]["batch_s"]
        assert abs(summary["batch_s_over_first"][mode] - over_first) <= 0.001 * over_first + 0.001
