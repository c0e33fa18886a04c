"""A session deleted while it is live goes on being traced (QA197 F7): its next step's
request is stored whole, not as an extension of a deleted step whose messages are gone, so
`traces show --content`, the viewer and export can still give every message of it."""
from __future__ import annotations

import json

from agents_trace.export import export_lines
from agents_trace.records import StepResult
from agents_trace.step_queries import list_steps, step_content
from agents_trace.store_delete import delete_sessions

from tests.agents_trace.helpers import ManualClock, make_tracer

OK = StepResult(num_input_tokens=10, num_output_tokens=1, worker="w0", ttft_s=0.1, finish_reason="stop",
                output_text="ok")
FIRST = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
SECOND = [*FIRST, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "and then?"}]
THIRD = [*SECOND, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]


def _ask(tracer, clock, messages: list) -> None:
    """One answered step of session S1 with `messages`, written to the store."""
    ctx = tracer.begin("acme", {"x-session-id": "S1"}, {"model": "tiny", "messages": list(messages)})
    clock.advance(1.0)
    tracer.end(ctx, OK)
    assert tracer.flush(5.0)


def _exported_messages(path) -> list:
    return [json.loads(line).get("messages") for line in export_lines(path, "acme", "S1")][1:]


def test_the_step_after_a_live_sessions_delete_keeps_its_request_whole(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    path = tmp_path / "traces.sqlite3"
    try:
        for messages in (FIRST, SECOND):
            _ask(tracer, clock, messages)
        assert step_content(path, "acme", "S1", 1)["prefix_step"] == 0   # the usual extension, before the delete
        assert delete_sessions(path, [("acme", "S1")]) == 2
        _ask(tracer, clock, THIRD)
    finally:
        tracer.stop()
    [kept] = list_steps(path, "acme", "S1")["data"]
    content = step_content(path, "acme", "S1", kept["index"])
    assert (content["num_prefix_messages"], content["prefix_step"]) == (0, None)
    assert content["new_messages"] == THIRD
    assert _exported_messages(path) == [THIRD]


def test_a_step_after_the_delete_never_extends_another_gateways_step_stored_where_its_prefix_was(tmp_path):
    """QA200 F1: gateways A and B share the store; A's step 0 is deleted, B stores a step of
    another conversation under the freed index 0: A's next step, which extended its own
    step 0, keeps its request whole instead of being read back on B's messages."""
    clock = ManualClock()
    a, _ = make_tracer(tmp_path, clock, capture_content=True)
    b, _ = make_tracer(tmp_path, clock, capture_content=True)
    path = tmp_path / "traces.sqlite3"
    other = [{"role": "system", "content": "agent Y"}, {"role": "user", "content": "Y question"}]
    try:
        _ask(a, clock, FIRST)
        assert delete_sessions(path, [("acme", "S1")]) == 1
        _ask(b, clock, other)
        _ask(a, clock, SECOND)
    finally:
        a.stop()
        b.stop()
    steps = list_steps(path, "acme", "S1")["data"]
    assert len(steps) == 2
    assert step_content(path, "acme", "S1", steps[0]["index"])["new_messages"] == other   # B's, at the freed index
    content = step_content(path, "acme", "S1", steps[1]["index"])
    assert (content["num_prefix_messages"], content["prefix_step"], content["new_messages"]) == (0, None, SECOND)
    assert _exported_messages(path) == [other, SECOND]
