"""bench_decode's runner level on the tiny model: one JSON line per N, tokens agree."""
from __future__ import annotations

import json

from tests.benchmarks.in_process import run_benchmark


def test_bench_decode_prints_one_line_per_batch_size_with_the_same_tokens():
    out = run_benchmark("bench_decode", "--model", "tiny", "--batch-sizes", "1,3", "--prompt-tokens", "40",
                        "--steps", "3", "--repeats", "2")
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [row["requests"] for row in rows] == [1, 3]
    for row in rows:
        assert row["level"] == "runner" and row["same_tokens"] is True
        assert row["serial_step_s"] > 0 and row["batched_step_s"] > 0
        assert abs(row["speedup"] - row["serial_step_s"] / row["batched_step_s"]) < 0.01 * row["speedup"] + 1e-3
