"""benchmarks/bench_sampling.py: a short run on the tiny model's logits reports every
setting, both sides and their ratio (the script itself checks each contender draw falls
in its nucleus)."""
from __future__ import annotations

import json

import torch

from benchmarks.bench_sampling import SETTINGS, multinomial_draw
from shards.protocol import SamplingParams
from tests.benchmarks.in_process import run_benchmark


def test_the_baseline_draws_within_the_nucleus():
    logits = torch.log(torch.tensor([0.6, 0.3, 0.05, 0.05]))
    generator = torch.Generator().manual_seed(3)
    params = SamplingParams(temperature=1.0, top_p=0.8)
    assert {multinomial_draw(logits, params, generator) for _ in range(300)} == {0, 1}


def test_a_short_run_reports_every_setting_and_both_sides():
    # in this process (no second torch import; run_benchmark keeps this process's threads)
    out = run_benchmark("bench_sampling", "--model", "tiny", "--rows", "20", "--rounds", "2")
    result = json.loads(out.strip().splitlines()[-1])
    assert result["rows"] == 20 and [row["setting"] for row in result["settings"]] == list(SETTINGS)
    for row in result["settings"]:
        assert row["baseline_us"] > 0 and row["contender_us"] > 0
        ratio = row["baseline_us"] / row["contender_us"]   # of the rounded times
        assert abs(row["baseline_over_contender"] - ratio) <= 0.01 * ratio + 0.01
        assert all(0.0 <= share <= 1.0 for share in row["likeliest_share"].values())
