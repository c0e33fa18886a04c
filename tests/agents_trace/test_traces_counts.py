"""`stepahead traces` counts what it did in words that agree with the number ("1 step",
"1 request", "1 session") and an export of every matching session counts only the
sessions it wrote lines of: one whose every step was refused (left out) matched, but the
file holds nothing of it (QA110 L1)."""
from __future__ import annotations

import json

import pytest

from agents_trace.export import ExportCounts, export_lines, export_sessions_lines
from agents_trace.records import StepResult
from tests.agents_trace.helpers import ManualClock, make_tracer
from tests.agents_trace.test_traces_command import _run

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def store(tmp_path):
    """Tenant acme: session "ok" of one step answered, session "refused" of one step
    refused (an unknown model: nothing generated, so no line)."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    for session, result in (("ok", StepResult(num_input_tokens=20, num_output_tokens=3)),
                            ("refused", StepResult(error="model_not_found", error_message="no such model"))):
        ctx = tracer.begin("acme", {"x-session-id": session}, BODY)
        clock.advance(0.5)
        tracer.end(ctx, result)
        clock.advance(1.0)
    tracer.stop()
    return tmp_path / "traces.sqlite3"


def test_export_all_counts_only_the_sessions_it_wrote_lines_of(store, capsys, tmp_path):
    out = tmp_path / "all.jsonl"
    assert _run(["traces", "export", "--all", "--db", str(store), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    lines = out.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["session"] == "ok"   # the refused session has no line
    assert json.loads(lines[0])["note"] == "stepahead: 1 session of 1 tenant(s) from traces.sqlite3"
    assert "stepahead: 1 request of 1 session of 1 tenant(s) written to" in err
    assert "stepahead: 1 failed step(s) left out" in err


def test_export_counts_say_which_sessions_have_lines(store):
    counts = ExportCounts()
    text = "".join(export_sessions_lines(store, [("acme", "ok"), ("acme", "refused")],
                                         lambda done: f"{done.num_sessions_written} written", counts=counts))
    assert json.loads(text.splitlines()[0])["note"] == "1 written"   # the header is written after the count
    assert (counts.num_sessions_written, counts.tenants_written, counts.num_failed_left_out) == (1, {"acme"}, 1)
    alone = ExportCounts()
    assert len(list(export_lines(store, "acme", "refused", alone))) == 1   # the header only
    assert alone.num_sessions_written == 0 and alone.num_failed_left_out == 1


def test_traces_delete_says_one_step_in_the_singular(store, capsys):
    assert _run(["traces", "delete", "--session", "ok", "--db", str(store), "--yes"]) == 0
    assert "deleted session 'ok' of tenant 'acme' (1 step)" in capsys.readouterr().err
