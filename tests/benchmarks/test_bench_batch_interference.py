"""benchmarks/bench_batch_interference.py on the tiny model, small (run in this process; each
mode's gateway is still a process of its own): running alone and one batch mode, and the
summary's ratios; their arithmetic over several modes and rounds on known runs."""
from __future__ import annotations

import json

from benchmarks.bench_batch_interference import summarize
from tests.benchmarks.in_process import run_benchmark


def test_the_benchmark_runs_alone_and_a_batch_mode_and_reports_ratios():
    out = run_benchmark("bench_batch_interference", "--model", "tiny", "--steps", "2", "--batch-requests", "3",
                        "--batch-tokens", "8", "--think-s", "0.05", "--modes", "batch_flex")
    summary = json.loads(out.strip().splitlines()[-1])["summary"]
    assert set(summary["ttft_mean_over_alone"]) == set(summary["batch_s_over_first"]) == {"batch_flex"}
    assert summary["batch_flex"]["batch_completed"] == 3 and summary["batch_s_over_first"]["batch_flex"] == 1
    assert summary["alone"]["ttft_mean_s"] > 0 and summary["batch_flex"]["batch_s"] > 0
    # the ratio from both of its sides (the script rounds it to 3 places)
    over_alone = summary["batch_flex"]["ttft_mean_s"] / summary["alone"]["ttft_mean_s"]
    assert abs(summary["ttft_mean_over_alone"]["batch_flex"] - over_alone) <= 0.001 * over_alone + 0.001


def test_the_summary_takes_medians_over_rounds_and_divides_by_alone_and_by_the_first_batch_mode():
    runs = {"alone": [{"ttft_mean_s": 0.1}, {"ttft_mean_s": 0.3}, {"ttft_mean_s": 0.2}],
            "batch_yield": [{"ttft_mean_s": 0.5, "batch_s": 4.0}, {"ttft_mean_s": 0.4, "batch_s": 2.0},
                            {"ttft_mean_s": 0.6, "batch_s": 3.0}],
            "batch_flex": [{"ttft_mean_s": 0.3, "batch_s": 9.0}, {"ttft_mean_s": 0.3, "batch_s": 6.0},
                           {"ttft_mean_s": 0.2, "batch_s": 7.0}]}
    summary = summarize(runs)
    assert summary["alone"] == {"ttft_mean_s": 0.2}
    assert summary["batch_yield"] == {"ttft_mean_s": 0.5, "batch_s": 3.0}
    assert summary["ttft_mean_over_alone"] == {"batch_yield": 2.5, "batch_flex": 1.5}
    assert summary["batch_s_over_first"] == {"batch_yield": 1.0, "batch_flex": 2.333}
