"""bench_attention on the tiny model: one JSON line per level and size, both ways agree."""
from __future__ import annotations

import json

from tests.benchmarks.in_process import run_benchmark


def test_bench_attention_prints_decode_and_suffix_lines_with_matching_logits():
    out = run_benchmark("bench_attention", "--model", "tiny", "--contexts", "30,200", "--batch-sizes", "1,3",
                        "--suffix-tokens", "7", "--steps", "2", "--repeats", "2")
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(row["level"], row["context_tokens"], row.get("requests", row.get("suffix_tokens"))) for row in rows] == [
        ("decode", 30, 1), ("decode", 30, 3), ("suffix", 30, 7), ("decode", 200, 1), ("decode", 200, 3),
        ("suffix", 200, 7)]
    for row in rows:
        assert row["max_abs_diff"] < 1e-4
        assert row["transformers_s"] > 0 and row["grouped_s"] > 0
        assert abs(row["speedup"] - row["transformers_s"] / row["grouped_s"]) < 0.01 * row["speedup"] + 1e-3
