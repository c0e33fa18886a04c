"""bench_attention on the tiny model: one JSON line per (context, N), both ways agree."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_attention.py"


def test_bench_attention_prints_one_line_per_context_and_batch_size_with_matching_logits():
    out = subprocess.run([sys.executable, str(SCRIPT), "--model", "tiny", "--contexts", "30,200",
                          "--batch-sizes", "1,3", "--steps", "2", "--repeats", "2"],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(row["context_tokens"], row["requests"]) for row in rows] == [(30, 1), (30, 3), (200, 1), (200, 3)]
    for row in rows:
        assert row["max_abs_diff"] < 1e-4
        assert row["transformers_step_s"] > 0 and row["grouped_step_s"] > 0
        assert abs(row["speedup"] - row["transformers_step_s"] / row["grouped_step_s"]) < 0.01 * row["speedup"] + 1e-3
