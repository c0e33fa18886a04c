"""benchmarks/bench_event_batches.py: a short run streams every token to each stream on
both engines (the script checks each stream's count and end) and reports both sides."""
from __future__ import annotations

import json

from tests.benchmarks.in_process import run_benchmark


def test_a_short_run_reports_both_sides_and_their_ratio():
    out = run_benchmark("bench_event_batches", "--streams", "3", "--tokens", "40", "--rounds", "2")
    result = json.loads(out.strip().splitlines()[-1])
    assert (result["streams"], result["tokens"], result["rounds"]) == (3, 40, 2)
    for side in ("one_by_one", "batched"):
        assert result[side]["cpu_us_per_token"] > 0 and result[side]["tokens_per_s"] > 0
    ratio = result["one_by_one"]["cpu_us_per_token"] / result["batched"]["cpu_us_per_token"]
    assert abs(result["one_by_one_over_batched"] - ratio) <= 0.01 * ratio + 0.01
