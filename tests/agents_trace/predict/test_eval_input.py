"""`python -m agents_trace.predict.eval` on files that are not tool sequences (FI6, QA76 #5):
a line without `steps` is counted and reported, a file with none is exit status 1, a
missing file or a line that is not JSON exit status 2, each one line on stderr, no
traceback and no score."""
from __future__ import annotations

import json

from agents_trace.predict import eval as predict_eval


def _run(capsys, *argv: str) -> tuple[int, str, list[str]]:
    status = predict_eval.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err.strip().splitlines()


def test_a_file_without_tool_sequences_is_an_error(tmp_path, capsys):
    data = tmp_path / "requests.jsonl"
    data.write_text("".join(json.dumps({"timestamp": i, "input_length": 10}) + "\n" for i in range(5))
                    + json.dumps({"id": "x", "stepz": ["USER"]}) + "\n")
    status, out, err = _run(capsys, "--data", str(data), "--json")
    assert status == 1 and out == ""
    assert err[-1] == f"error: {data} holds no tool sequences (no line has a `steps` list)"
    assert "6 line(s) have no `steps` list" in err[0]


def test_lines_without_steps_are_counted_and_the_rest_scored(tmp_path, capsys):
    data = tmp_path / "mixed.jsonl"
    rows = [{"id": f"s{i}", "domain": "a", "steps": ["USER", "ls", "ASSISTANT_TEXT"]} for i in range(12)]
    rows.insert(3, {"id": "bad", "stepz": ["USER"]})
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    status, out, err = _run(capsys, "--data", str(data), "--json")
    assert status == 0 and json.loads(out)["predictor"]["n"] == 5 * 4   # odd file lines 1, 5, .. 11; END appended
    assert err == [f"warning: {data}: 1 line(s) have no `steps` list of strings; left out"]


def test_an_unreadable_file_is_one_line_and_status_2(tmp_path, capsys):
    status, out, err = _run(capsys, "--data", str(tmp_path / "missing.jsonl"))
    assert status == 2 and out == "" and len(err) == 1 and "missing.jsonl: cannot be read" in err[0]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"steps": ["USER"]}\nnot json\n')
    status, out, err = _run(capsys, "--data", str(bad))
    assert status == 2 and out == "" and len(err) == 1 and "line 2 is not JSON" in err[0]


def test_a_file_that_leaves_nothing_to_score_is_an_error_not_a_perfect_score(tmp_path, capsys):
    """QA160: one line trains and none tests: it printed log-loss 0 over n 0, status 0."""
    data = tmp_path / "one.jsonl"
    data.write_text(json.dumps({"id": "s0", "domain": "a", "steps": ["USER", "ls", "ASSISTANT_TEXT"]}) + "\n")
    status, out, err = _run(capsys, "--data", str(data), "--json")
    assert status == 1 and out == "" and err == [f"error: {data} leaves nothing to score: its 1 tool sequence(s) "
                                                 "all train (each tenant's odd-indexed lines test)"]


def test_steps_that_are_not_strings_are_left_out(tmp_path, capsys):
    data = tmp_path / "ints.jsonl"
    rows = [{"id": f"s{i}", "domain": "a", "steps": ["USER", "ls", "ASSISTANT_TEXT"]} for i in range(4)]
    rows.append({"id": "bad", "domain": "a", "steps": [1, None, "x"]})
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    status, out, err = _run(capsys, "--data", str(data), "--json")
    assert status == 0 and json.loads(out)["predictor"]["n"] == 2 * 4
    assert err == [f"warning: {data}: 1 line(s) have no `steps` list of strings; left out"]
