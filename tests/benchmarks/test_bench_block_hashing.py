"""bench_block_hashing: one line per prompt length, each comparison's ways timed, the ratios
from the medians."""
from __future__ import annotations

import json

from tests.benchmarks.in_process import run_benchmark


def test_bench_block_hashing_reports_both_ways_and_the_ratio_per_length():
    out = run_benchmark("bench_block_hashing", "--lengths", "40,200", "--prompts", "3", "--rounds", "2",
                        "--step-tokens", "20")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [row["prompt_tokens"] for row in rows] == [40, 200]
    for row in rows:
        times = row["us_per_prompt"]
        assert times["block_by_block"] > 0 and times["chain_hashes"] > 0
        assert all(len(values) == 2 for values in row["us_per_prompt_rounds"].values())
        ratio = times["block_by_block"] / times["chain_hashes"]
        assert abs(row["baseline_over_contender"] - ratio) <= 0.01 * ratio + 0.01
        session = row["agent_session"]
        assert session["steps"] == len(range(row["prompt_tokens"] // 2, row["prompt_tokens"] + 1, 20))
        per_step = session["us_per_step"]
        ratio = per_step["chain_hashes"] / per_step["session_hashes"]
        assert abs(session["baseline_over_contender"] - ratio) <= 0.01 * ratio + 0.01
