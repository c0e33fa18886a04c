"""benchmarks/bench_flex_eviction.py: the summary's known answers, and a small run on the
tiny model (one mode: a gateway start each) where the agents' later steps find their
context cached beside a batch."""
from __future__ import annotations

import json

from benchmarks.bench_flex_eviction import summarize, words
from tests.benchmarks.in_process import run_benchmark


def test_words_are_fixed_by_their_tag():
    assert words("a0", 5) == words("a0", 5) != words("a1", 5)
    assert len(words("a0", 7).split()) == 7


def test_the_summary_takes_medians_and_the_old_orders_ratios():
    def run(ttft: float, share: float, batch: float) -> dict:
        return {"ttft_mean_s": ttft, "ttft_p50_s": ttft, "cached_share": share, "batch_s": batch}
    summary = summarize({"flex_first": [run(1.0, 0.9, 10.0), run(3.0, 0.7, 30.0), run(2.0, 0.8, 20.0)],
                         "lru_order": [run(4.0, 0.4, 22.0)]})
    assert summary["flex_first"] == run(2.0, 0.8, 20.0)
    assert summary["lru_order_over_flex_first"] == {"ttft_mean_s": 2.0, "ttft_p50_s": 2.0, "cached_share": 0.5,
                                                    "batch_s": 1.1}
    assert "lru_order_over_flex_first" not in summarize({"flex_first": [run(1.0, 0.9, 10.0)]})


def test_a_small_run_beside_a_batch_reports_the_agents_cache():
    out = run_benchmark("bench_flex_eviction", "--model", "tiny", "--steps", "2", "--tool-s", "0.05",
                        "--system-words", "40", "--result-words", "5", "--batch-requests", "2", "--batch-words", "20",
                        "--batch-tokens", "4", "--hot-blocks", "400", "--modes", "flex_first")
    [run] = json.loads(out.strip().splitlines()[-1])["runs"]["flex_first"]
    assert run["batch_completed"] == 2
    assert 0 < run["cached_share"] <= 1   # room for everything: the second step reuses the first
