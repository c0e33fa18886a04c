"""`stepahead traces list --json` and `show --json` escape what the text output escapes
(bidirectional controls such as U+202E, C1 controls, other format characters) as JSON
`\\uXXXX`, so the line cannot drive the terminal; the JSON means the same."""
from __future__ import annotations

import json

from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session
from tests.agents_trace.test_traces_command import _run

SESSION = "invoice_\u202etxt.exe \x85 \u200f 会话 🚀"


def test_terminal_json_escapes_only_what_text_output_escapes():
    from agents_trace.text_table import terminal_json

    value = {"id": SESSION, "tag": "\U000e0001", "lone": "\ud800", "ok": "café 会话 🚀 \t\n"}
    text = terminal_json(value)
    assert text.isprintable() and json.loads(text) == value
    assert "café 会话 🚀" in text and "\\u202e" in text and "\\u0085" in text and "\\udb40\\udc01" in text


def test_list_and_show_json_print_no_raw_bidi_or_c1_characters(tmp_path, capsys):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    run_scripted_session(tracer, clock, headers={"x-session-id": SESSION.encode().decode("latin-1")})
    tracer.stop()
    db = ["--db", str(tmp_path / "traces.sqlite3")]
    assert _run(["traces", "list", "--json", *db]) == 0
    listed = capsys.readouterr().out
    assert _run(["traces", "show", SESSION, "--json", *db]) == 0
    shown = capsys.readouterr().out
    for out in (listed, shown):
        assert out.rstrip("\n").isprintable() and "\u202e" not in out and "\\u202e" in out and "会话 🚀" in out
    assert json.loads(listed)["data"][0]["session"] == SESSION
    assert json.loads(shown)["session"]["session"] == SESSION
