"""`python -m agents_trace.predict.timing` on a file it cannot time or a bad count: one
line and the exit status `agents_trace.predict.eval` gives the same file, no traceback."""
from __future__ import annotations

import json

import pytest

from agents_trace.predict import timing


@pytest.mark.parametrize("name, text, status, reason", [
    ("missing", None, 2, "cannot be read"),
    ("not_json", "hello\n", 2, "line 1 is not JSON"),
    ("empty", "", 1, "holds no tool sequences"),
    ("mooncake", json.dumps({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}) + "\n",
     1, "holds no tool sequences"),
])
def test_a_file_without_tool_sequences_is_one_error_line(tmp_path, capsys, name, text, status, reason):
    path = tmp_path / f"{name}.jsonl"
    if text is not None:
        path.write_text(text)
    assert timing.main(["--data", str(path), "--sessions", "4", "--repeats", "1"]) == status
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[-1].startswith("error: ") and reason in captured.err


@pytest.mark.parametrize("flag, value", [("--sessions", "0"), ("--repeats", "0"), ("--sessions", "-3"),
                                         ("--repeats", "x")])
def test_a_count_below_one_is_a_usage_error(tmp_path, capsys, flag, value):
    with pytest.raises(SystemExit) as stop:
        timing.main(["--data", str(tmp_path / "any.jsonl"), flag, value])
    assert stop.value.code == 2
    assert f"argument {flag}:" in capsys.readouterr().err


def test_a_file_of_empty_tool_sequences_is_one_error_line(tmp_path, capsys):
    from agents_trace.predict.timing import main

    data = tmp_path / "empty.jsonl"
    data.write_text('{"steps": []}\n{"steps": []}\n')
    assert main(["--data", str(data), "--sessions", "2", "--repeats", "1"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [f"error: {data} holds only empty tool sequences"]
