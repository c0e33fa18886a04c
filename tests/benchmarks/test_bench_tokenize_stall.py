"""benchmarks/bench_tokenize_stall.py: a short run prints one valid JSON line with both
sides of both prompts (the same ids), and the baseline's swap of the encode is undone."""
from __future__ import annotations

import json

from benchmarks import bench_tokenize_stall
from gateway import prompt_token_cache
from shards import special_text
from tests.benchmarks.in_process import run_benchmark


def test_the_baseline_swaps_the_encode_in_and_back():
    released = special_text.encode_releasing_gil
    with bench_tokenize_stall.side("baseline"):
        assert special_text.encode_releasing_gil is bench_tokenize_stall.holding_gil_encode
        assert prompt_token_cache.encode_releasing_gil is bench_tokenize_stall.holding_gil_encode
    with bench_tokenize_stall.side("contender"):
        assert special_text.encode_releasing_gil is released
    assert special_text.encode_releasing_gil is released and prompt_token_cache.encode_releasing_gil is released


def test_a_short_run_reports_both_sides_of_both_prompts():
    out = run_benchmark("bench_tokenize_stall", "--model", "tiny", "--chars", "20000", "--repeats", "2",
                        "--tick-ms", "1")
    result = json.loads(out.strip().splitlines()[-1])
    assert result["benchmark"] == "tokenize_stall" and result["model"] == "tiny" and result["repeats"] == 2
    assert set(result["prompts"]) == {"plain", "marked"}
    for row in result["prompts"].values():
        assert row["same_ids"] is True and row["prompt_chars"] > 20000 and row["prompt_tokens"] > 0
        for side in ("baseline", "contender"):
            figures = row[side]
            assert len(figures["longest_gaps_ms"]) == 2 and figures["longest_gap_ms_median"] > 0
            assert figures["tokenize_s_median"] > 0
        ratio = row["baseline"]["longest_gap_ms_median"] / row["contender"]["longest_gap_ms_median"]
        assert abs(row["baseline_over_contender"] - ratio) <= 0.05 + 0.01 * ratio
    assert special_text.encode_releasing_gil is not bench_tokenize_stall.holding_gil_encode
