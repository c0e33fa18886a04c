"""Tool-call arguments are the model's reply, often the user's data (QA149 F2): with
`capture_content` off the store keeps a call's id and name but not its arguments (every
choice's), and the trace API and `traces show --json` serve "" for them, also from a
store written before they were left out; with it on they are kept."""
from __future__ import annotations

import argparse
import json
import sqlite3
from contextlib import closing

import pytest

from agents_trace.records import ChoiceOutput, StepResult, ToolCall
from agents_trace.step_queries import iter_session_steps, list_steps
from agents_trace.traces_command import register

from tests.agents_trace.helpers import ManualClock, make_tracer

SECRET = '{"ssn": "078-05-1120"}'
OTHER_SECRET = '{"address": "1 Main St"}'


def _store_one_step(tmp_path, capture: bool):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=capture)
    ctx = tracer.begin("acme", {"x-session-id": "claim"}, {"model": "tiny", "n": 2, "messages": [
        {"role": "user", "content": "File my claim."}]})
    clock.advance(0.5)
    tracer.end(ctx, StepResult(num_input_tokens=10, num_output_tokens=9, finish_reason="tool_calls",
                               tool_calls=(ToolCall("call_1", "file_claim", SECRET),),
                               other_choices=(ChoiceOutput("tool_calls",
                                                           (ToolCall("call_2", "lookup", OTHER_SECRET),)),)))
    tracer.stop()
    return tmp_path / "traces.sqlite3"


def _show_json(path, capsys) -> dict:
    parser = argparse.ArgumentParser(prog="stepahead")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["traces", "show", "claim", "--json", "--db", str(path)])
    assert args.handler(args) == 0
    return json.loads(capsys.readouterr().out)


def _calls(step: dict) -> list[tuple]:
    return [(c["call_id"], c["name"], c["arguments"]) for c in
            step["tool_calls"] + [call for choice in step["other_choices"] for call in choice["tool_calls"]]]


@pytest.mark.parametrize("capture", [False, True])
def test_tool_call_arguments_are_stored_and_served_only_when_content_is_captured(tmp_path, capsys, capture):
    path = _store_one_step(tmp_path, capture)
    expected = [("call_1", "file_claim", SECRET if capture else ""),
                ("call_2", "lookup", OTHER_SECRET if capture else "")]
    [listed] = list_steps(path, "acme", "claim")["data"]   # GET /v1/traces/sessions/{id}
    [(exported, _)] = list(iter_session_steps(path, "acme", "claim"))   # exports
    [shown] = _show_json(path, capsys)["steps"]   # stepahead traces show --json
    for step in (listed, exported, shown):
        assert _calls(step) == expected and step["has_content"] is capture
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("traces.sqlite3*"))
    assert (b"078-05-1120" in stored, b"1 Main St" in stored) == (capture, capture)


def test_a_store_written_before_arguments_were_left_out_serves_none_of_them(tmp_path):
    path = _store_one_step(tmp_path, capture=False)
    with closing(sqlite3.connect(path)) as db, db:   # what an older gateway wrote
        db.execute("UPDATE steps SET tool_calls = ?, other_choices = ?",
                   (json.dumps([["call_1", "file_claim", SECRET]]),
                    json.dumps([["tool_calls", [["call_2", "lookup", OTHER_SECRET]]]])))
    [step] = list_steps(path, "acme", "claim")["data"]
    assert _calls(step) == [("call_1", "file_claim", ""), ("call_2", "lookup", "")]
