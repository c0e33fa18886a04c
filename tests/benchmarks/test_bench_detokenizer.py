"""benchmarks/bench_detokenizer.py: the baseline and the contender emit the same text (the
whole output's decode), and a short run reports both sides and their ratio."""
from __future__ import annotations

import json

from benchmarks.bench_detokenizer import STOP, WholeDecodeDetokenizer
from shards.detokenizer import Detokenizer
from shards.tiny_model import build_tiny_tokenizer
from tests.benchmarks.in_process import run_benchmark


def test_the_baseline_and_the_contender_emit_the_same_deltas():
    tokenizer = build_tiny_tokenizer()
    ids = tokenizer.encode("a héllo </ans then ✓ and more text " * 20, add_special_tokens=False)
    streams = []
    for detokenizer in (WholeDecodeDetokenizer(tokenizer, STOP), Detokenizer(tokenizer, STOP)):
        streams.append([detokenizer.push(token) for token in ids] + [detokenizer.flush()])
    assert streams[0] == streams[1]
    assert "".join(streams[0]) == tokenizer.decode(ids, skip_special_tokens=True)


def test_a_short_run_reports_both_sides_and_their_ratio():
    out = run_benchmark("bench_detokenizer", "--model", "tiny", "--lengths", "50,300", "--rounds", "2")
    result = json.loads(out.strip().splitlines()[-1])
    assert [row["reply_tokens"] for row in result["replies"]] == [50, 300]
    for row in result["replies"]:
        assert row["whole_us_per_token"] > 0 and row["window_us_per_token"] > 0
        ratio = row["whole_us_per_token"] / row["window_us_per_token"]   # of the rounded times
        assert abs(row["whole_over_window"] - ratio) <= 0.01 * ratio + 0.01
