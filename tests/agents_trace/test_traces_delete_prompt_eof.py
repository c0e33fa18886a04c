"""Ctrl+D (end of input) at `stepahead traces delete`'s [y/N] prompt is a "no"."""
from __future__ import annotations

import sqlite3

from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session
from tests.agents_trace.test_traces_command import _run


def test_end_of_input_at_the_delete_prompt_deletes_nothing_as_a_no_does(tmp_path, capsys, monkeypatch):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    run_scripted_session(tracer, clock, headers={"x-session-id": "keep"})
    tracer.stop()
    store = tmp_path / "traces.sqlite3"

    def ctrl_d(question: str) -> str:
        raise EOFError

    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", ctrl_d)
    assert _run(["traces", "delete", "--session", "keep", "--db", str(store)]) == 2
    err = capsys.readouterr().err
    assert err == "\nstepahead: nothing deleted (pass --yes to delete without asking)\n"
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT count(*) FROM steps").fetchone()[0] == 3
