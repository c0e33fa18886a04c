"""A session id longer than the gateway keeps (stored cut to its first 256 characters)
is found by the id as the client sent it, as the gateway itself takes it."""
from __future__ import annotations

import json

from agents_trace.header_ids import encode_header_id
from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session
from tests.agents_trace.test_traces_command import _run

SENT = "long-" + "\U0001f642" * 3 + "y" * 300   # 308 characters


def test_show_export_and_delete_find_a_long_session_by_the_id_as_sent(tmp_path, capsys):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    run_scripted_session(tracer, clock, headers={"x-session-id": encode_header_id(SENT)})
    tracer.stop()
    db = ["--db", str(tmp_path / "traces.sqlite3")]
    for given in (SENT, encode_header_id(SENT), f"  {SENT}"):
        assert _run(["traces", "show", given, "--json", *db]) == 0, capsys.readouterr().err
        assert json.loads(capsys.readouterr().out)["session"]["session"] == SENT[:256]
    assert _run(["traces", "export", "--session", SENT, *db]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4
    assert _run(["traces", "show", SENT[:255] + "z" + SENT[256:], *db]) == 1   # another id
    assert _run(["traces", "delete", "--session", SENT, "--yes", *db]) == 0
