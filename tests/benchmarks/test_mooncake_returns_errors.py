"""benchmarks/mooncake_returns.py on a file it cannot analyse: one `error:` line and exit
status 2 (as `python -m cache.sim` refuses it), never a traceback."""
from __future__ import annotations

import json

import pytest

from benchmarks.mooncake_returns import main

TOOLSEQ = {"id": "a", "domain": "d", "steps": ["USER", "search", "FINISH"]}
STEPAHEAD_WITHOUT_HASHES = [{"t": 0.0, "input_tokens": 600, "output_tokens": 5},
                            {"t": 1.0, "input_tokens": 700, "output_tokens": 5}]


@pytest.mark.parametrize("name, text, reason", [
    ("missing", None, "No such file or directory"),
    ("empty", "", "holds 0 requests"),
    ("not_json", "hello\n", "line 1: not JSON"),
    ("toolseq", json.dumps(TOOLSEQ) + "\n", "tool-sequence"),
    ("no_hash_ids", "".join(json.dumps(row) + "\n" for row in STEPAHEAD_WITHOUT_HASHES), "request 1 has no hash_ids"),
    ("one_request", json.dumps({"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1]}) + "\n",
     "holds 1 request;"),
])
def test_a_file_it_cannot_analyse_is_one_error_line_and_exit_2(tmp_path, capsys, name, text, reason):
    path = tmp_path / f"{name}.jsonl"
    if text is not None:
        path.write_text(text)
    assert main(["--trace", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("error: ") and reason in line and str(path) in line


def test_a_trace_where_nothing_returns_is_refused_not_a_percentile_of_nothing(tmp_path, capsys):
    lines = [{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]},
             {"timestamp": 1000, "input_length": 1024, "output_length": 1, "hash_ids": [3, 4]}]
    path = tmp_path / "fresh.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["--trace", str(path)]) == 2
    assert "no request continues an earlier one" in capsys.readouterr().err


def test_a_good_trace_still_prints_its_json(tmp_path, capsys):
    lines = [{"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [0, 1]},
             {"timestamp": 5000, "input_length": 1536, "output_length": 10, "hash_ids": [0, 1, 3]}]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["--trace", str(path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["continued_requests"] == 1 and result["first_return_gap_s"]["p50"] == 5.0
    assert result["blocks_per_s"] == 1.0   # 5 blocks over 5 s
