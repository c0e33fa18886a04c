"""Tool-sequence files: a bad one is one error naming the file and the line, never a traceback."""
from __future__ import annotations

import pytest

from agents_trace.workload.tool_patterns import PatternFileError, learn_patterns

GOOD_LINE = '{"id": 1, "domain": "fs", "steps": ["USER", "ls", "ASSISTANT_TEXT"]}\n'


@pytest.mark.parametrize("content, message", [
    ('{"a": 1}\n', "line 1: 'steps' must be a list of step names (strings)"),
    (GOOD_LINE + '{"steps": "USER"}\n', "line 2: 'steps' must be a list of step names (strings)"),
    (GOOD_LINE + '{"steps": ["USER", 3]}\n', "line 2: 'steps' must be a list of step names (strings)"),
    (GOOD_LINE + '\n[1, 2]\n', "line 3: expected a JSON object with 'steps'"),
    ('{"domain": 7, "steps": []}\n', "line 1: 'domain' must be a string"),
    (GOOD_LINE + '{"id": "x", "domain": "d", "steps": []}\n',
     "line 2: 'steps' is empty (a recorded session has at least one step)"),   # QA210 F5
    ("root:x:0:0:root:/root:/bin/bash\n", "line 1: not JSON (Expecting value)"),
])
def test_learn_patterns_names_the_file_and_line_of_a_bad_trajectory(tmp_path, content, message):
    path = tmp_path / "seq.jsonl"
    path.write_text(content)
    with pytest.raises(PatternFileError) as error:
        learn_patterns([path])
    assert str(error.value) == f"cannot read {path}: {message}"


def test_learn_patterns_names_a_file_it_cannot_open(tmp_path):
    with pytest.raises(PatternFileError, match=r"^cannot read .*missing\.jsonl: No such file or directory$"):
        learn_patterns([tmp_path / "missing.jsonl"])
    with pytest.raises(PatternFileError, match=r"^cannot read .*: Is a directory$"):
        learn_patterns([tmp_path])
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\n")
    with pytest.raises(PatternFileError, match=r"^cannot read .*binary\.jsonl: not UTF-8 text"):
        learn_patterns([binary])


@pytest.mark.parametrize("bom", ["", "\ufeff"], ids=["plain", "byte-order-mark"])
def test_learn_patterns_known_answer_on_good_lines(tmp_path, bom):
    """A file saved with a UTF-8 byte-order mark reads as the trace readers read one (QA202 F4)."""
    path = tmp_path / "seq.jsonl"
    path.write_text(bom + GOOD_LINE + "\n" + GOOD_LINE, encoding="utf-8")
    [patterns] = learn_patterns([path])
    assert patterns.domain == "fs" and patterns.tools == ["ls"]
    assert patterns.transitions == {"START": {"USER": 2}, "USER": {"ls": 2}, "ls": {"ASSISTANT_TEXT": 2},
                                    "ASSISTANT_TEXT": {"END": 2}}
    assert patterns.turn_counts == {1: 2}


@pytest.mark.parametrize("name, content, message", [
    ("missing.jsonl", None, "No such file or directory"),
    ("dir", "DIR", "Is a directory"),
    ("shape.json", '{"a": 1}\n', "line 1: 'steps' must be a list of step names (strings)"),
    ("passwd", "root:x:0:0::/root:/bin/sh\n", "line 1: not JSON"),
    ("empty_steps.jsonl", '{"id": "x", "domain": "d", "steps": []}\n', "line 1: 'steps' is empty"),
])
def test_workload_generate_bad_patterns_file_is_one_error_line(tmp_path, capsys, name, content, message):
    from gateway.cli import main

    path = tmp_path / name
    if content == "DIR":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    out = tmp_path / "w.jsonl"
    assert main(["workload", "generate", "--tenants", "1", "--sessions", "1", "--patterns", str(path),
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot read {path}: ") and message in err and err.count("\n") == 1
    assert not out.exists()


def test_workload_generate_patterns_without_a_file_is_a_usage_error(tmp_path, capsys):
    """QA210 F5: `--patterns` with no file after it is not taken as the packaged patterns."""
    from gateway.cli import main

    out = tmp_path / "w.jsonl"
    with pytest.raises(SystemExit) as exit_:
        main(["workload", "generate", "--tenants", "1", "--sessions", "1", "-o", str(out), "--patterns"])
    assert exit_.value.code == 2 and "--patterns: expected at least one argument" in capsys.readouterr().err
    assert not out.exists()
