"""benchmarks/bench_penalties.py: the baseline's penalties are the contender's, and a short
run reports both sides and their ratio."""
from __future__ import annotations

import json

import torch

from benchmarks.bench_penalties import PARAMS, recounted
from shards.sampling import adjusted_logits
from tests.benchmarks.in_process import run_benchmark


def test_the_baseline_penalises_as_the_contender_does():
    logits = torch.randn(32, generator=torch.Generator().manual_seed(2))
    output = [3, 5, 3, 31, 0, 3]
    assert torch.allclose(recounted(logits, PARAMS, output), adjusted_logits(logits, PARAMS, output))
    assert recounted(logits, PARAMS, output)[3] == logits[3] - (3 * PARAMS.frequency_penalty + PARAMS.presence_penalty)


def test_a_short_run_reports_both_sides_and_their_ratio():
    # in this process (no second torch import; run_benchmark keeps this process's threads)
    out = run_benchmark("bench_penalties", "--lengths", "30,120", "--rounds", "2", "--vocab", "4096")
    result = json.loads(out.strip().splitlines()[-1])
    assert result["vocab"] == 4096 and [row["reply_tokens"] for row in result["replies"]] == [30, 120]
    for row in result["replies"]:
        assert row["recount_us_per_token"] > 0 and row["kept_us_per_token"] > 0
        ratio = row["recount_us_per_token"] / row["kept_us_per_token"]   # of the rounded times
        assert abs(row["recount_over_kept"] - ratio) <= 0.01 * ratio + 0.01
