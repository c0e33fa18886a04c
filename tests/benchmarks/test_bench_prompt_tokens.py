"""benchmarks/bench_prompt_tokens.py and its TTFT companion end to end on the tiny model:
both ways give the same ids at every step (the script exits otherwise), and the report
has a band for each context length reached."""
from __future__ import annotations

import json

from tests.benchmarks.in_process import run_benchmark


def _run(module: str, *args: str) -> dict:
    return json.loads(run_benchmark(module, "--model", "tiny", *args).strip().splitlines()[-1])


def test_tokenizing_whole_and_spliced_agree_and_are_both_timed():
    result = _run("bench_prompt_tokens", "--tenants", "2", "--sessions", "2", "--steps", "6")
    assert result["steps"] == 24 and result["cache"]["disabled"] is None
    # all but each tenant's first prompt: a tenant's sessions share its system prompt
    assert result["cache"]["num_spliced"] == 24 - 2
    assert result["cache"]["num_reused_ids"] > 0
    for band in result["bands"].values():
        assert band["baseline_ms"] > 0 and band["contender_ms"] > 0 and band["speedup"] > 0
    assert sum(band["steps"] for band in result["bands"].values()) == 24


def test_the_ttft_run_sends_each_step_as_both_tenants():
    result = _run("bench_prompt_tokens_ttft", "--steps", "3", "--repeats", "1")
    assert [row["step"] for row in result["per_step"]] == [0, 1, 2]
    assert all(row["spliced"] > 0 and row["whole"] > 0 for row in result["per_step"])
    assert result["cache"]["num_spliced"] == 2 and result["all"]["ttft_ratio"] > 0
