"""benchmarks/bench_flex_eviction.py on the tiny model, small: both orders run beside a
batch, the agents' later steps find their context cached, and the summary compares them."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_flex_eviction import words  # noqa: E402


def test_words_are_fixed_by_their_tag():
    assert words("a0", 5) == words("a0", 5) != words("a1", 5)
    assert len(words("a0", 7).split()) == 7


def test_the_benchmark_runs_both_orders_and_reports_ratios():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_flex_eviction.py"), "--model", "tiny",
                           "--steps", "2", "--tool-s", "0.05", "--system-words", "40", "--result-words", "5",
                           "--batch-requests", "2", "--batch-words", "20", "--batch-tokens", "4", "--hot-blocks", "400",
                           "--modes", "flex_first,lru_order"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])["summary"]
    for mode in ("flex_first", "lru_order"):
        assert summary[mode]["batch_completed"] == 2
        assert 0 < summary[mode]["cached_share"] <= 1   # room for everything: the second step reuses the first
    assert set(summary["lru_order_over_flex_first"]) == {"ttft_mean_s", "ttft_p50_s", "cached_share", "batch_s"}
