"""One session two gateways serve in turn on one trace store (QA200 F2): each step's gap
(and its `execute_tool` span) runs from the previous response, the other gateway's,
found in the store; a single gateway's gaps stay its session table's."""
from __future__ import annotations

import uuid

import pytest

from agents_trace.records import StepResult, ToolCall
from agents_trace.step_queries import list_steps
from agents_trace.store_delete import delete_sessions

from tests.agents_trace.helpers import ManualClock, idle_out, make_tracer, run_scripted_session, tool_call_message
from tests.agents_trace.test_store_shared_writers import _ask

HEADERS = {"x-session-id": "alt"}


@pytest.fixture
def clock():
    return ManualClock()


def _two_gateways(tmp_path, clock):
    """Gateways A and B on one store, started a second apart (as two processes are)."""
    a, a_spans = make_tracer(tmp_path, clock)
    clock.advance(1.0)
    b, b_spans = make_tracer(tmp_path, clock)
    return (a, a_spans), (b, b_spans)


def _tool_step(tracer, clock, messages: list, call_id: str, llm_s: float = 0.5, tool_s: float = 1.0) -> None:
    """One step on `tracer` asking for `get_weather` (`call_id`); after `tool_s` of tool run
    its call and result are appended to `messages`."""
    request_id = f"chatcmpl-{uuid.uuid4().hex}"
    ctx = tracer.begin("acme", HEADERS, {"model": "tiny", "messages": list(messages)}, request_id=request_id)
    clock.advance(llm_s)
    tracer.end(ctx, StepResult(num_input_tokens=10 * len(messages), num_output_tokens=5, finish_reason="tool_calls",
                               tool_calls=(ToolCall(call_id, "get_weather", "{}"),), response_id=request_id))
    assert tracer.flush(5.0)
    clock.advance(tool_s)
    messages += [tool_call_message(call_id, "get_weather"),
                 {"role": "tool", "tool_call_id": call_id, "content": "sunny"}]


def _tool_spans(exporter) -> list[float]:
    """The durations (s) of the `execute_tool` spans `exporter` got."""
    return [(s.end_time - s.start_time) / 1e9 for s in exporter.get_finished_spans()
            if s.attributes.get("gen_ai.operation.name") == "execute_tool"]


def test_tool_runs_of_a_session_two_gateways_serve_in_turn_count_from_the_other_gateways_step(tmp_path, clock):
    """A, B, A, B, A, each step asking for a tool that runs 1.0 s: every step after the
    first has gap 1.0 from the step just before it (the other gateway's), in the store and
    in both gateways' `execute_tool` spans."""
    (a, a_spans), (b, b_spans) = _two_gateways(tmp_path, clock)
    try:
        messages = [{"role": "user", "content": "weather in five cities"}]
        for number, tracer in enumerate((a, b, a, b, a)):
            _tool_step(tracer, clock, messages, f"call_{number}")
        steps = list_steps(a.store_path, "acme", "alt")["data"]
        assert [s["index"] for s in steps] == [0, 1, 2, 3, 4]
        assert [s["gap_s"] for s in steps] == [None, 1.0, 1.0, 1.0, 1.0]
        assert [s["prev_ended_s"] for s in steps[1:]] == [s["ended_s"] for s in steps[:-1]]
        assert _tool_spans(a_spans) == pytest.approx([1.0, 1.0], abs=1e-6)
        assert _tool_spans(b_spans) == pytest.approx([1.0, 1.0], abs=1e-6)
    finally:
        a.stop()
        b.stop()


def test_user_turns_of_a_session_two_gateways_serve_in_turn_count_from_the_other_gateways_reply(tmp_path, clock):
    """No tool calls to match: the previous response is the latest the other gateway stored."""
    (a, _), (b, _) = _two_gateways(tmp_path, clock)
    try:
        messages = [{"role": "user", "content": "plan a trip"}]
        for tracer in (a, b, a, b):
            _ask(tracer, clock, messages, session="alt")
        steps = list_steps(a.store_path, "acme", "alt")["data"]
        assert [s["gap_s"] for s in steps] == [None, 1.0, 1.0, 1.0]
        assert [s["prev_ended_s"] for s in steps[1:]] == [s["ended_s"] for s in steps[:-1]]
    finally:
        a.stop()
        b.stop()


def test_a_tool_run_counts_from_the_reply_that_asked_for_it_not_another_gateways_later_step(tmp_path, clock):
    """A asks for a tool; while it runs, B serves a call under the session's id (an agent
    used as a tool); the result, on A, counts its run from A's reply, as on one gateway."""
    (a, a_spans), (b, _) = _two_gateways(tmp_path, clock)
    try:
        messages = [{"role": "user", "content": "translate this"}]
        _tool_step(a, clock, messages, "call_t", tool_s=0.2)   # A's reply ends; the tool starts
        _ask(b, clock, [{"role": "user", "content": "good morning"}], session="alt")   # 0.5 s, then 1.0 s
        _ask(a, clock, messages, session="alt")
        steps = list_steps(a.store_path, "acme", "alt")["data"]
        assert [s["after_label"] for s in steps] == ["start", "start", "tool:get_weather"]   # B's first: its start
        assert steps[2]["prev_ended_s"] == steps[0]["ended_s"]
        assert steps[2]["gap_s"] == pytest.approx(1.7)
        assert _tool_spans(a_spans) == pytest.approx([1.7], abs=1e-6)
    finally:
        a.stop()
        b.stop()


def test_a_single_gateways_gaps_are_its_session_tables(tmp_path, clock):
    tracer, exporter = make_tracer(tmp_path, clock)
    try:
        run_scripted_session(tracer, clock, headers=HEADERS)
        assert tracer.flush(5.0)
        steps = list_steps(tracer.store_path, "acme", "alt")["data"]
        assert [s["gap_s"] for s in steps] == [None, 2.0, 3.0]
        assert _tool_spans(exporter) == pytest.approx([2.0, 3.0], abs=1e-6)
        assert not tracer._writer._open[("acme", "alt")].is_shared   # no read of its stored steps
    finally:
        tracer.stop()


def test_a_gateway_resuming_a_session_the_other_served_since_counts_from_the_others_reply(tmp_path, clock):
    """A answers, B answers, both end the session idle; A's next step (its session table
    resuming the session from its own reply) counts its gap from B's, the latest."""
    a, _ = make_tracer(tmp_path, clock, session_idle_timeout_s=60.0)
    clock.advance(1.0)
    b, _ = make_tracer(tmp_path, clock, session_idle_timeout_s=60.0)
    try:
        messages = [{"role": "user", "content": "plan a trip"}]
        _ask(a, clock, messages, session="alt")
        _ask(b, clock, messages, session="alt")
        idle_out(a, clock, 61.0)
        idle_out(b, clock, 0.0)
        _ask(a, clock, messages, session="alt")
        steps = list_steps(a.store_path, "acme", "alt")["data"]
        assert steps[2]["prev_ended_s"] == steps[1]["ended_s"]
        assert steps[2]["gap_s"] == pytest.approx(62.0)
    finally:
        a.stop()
        b.stop()


@pytest.mark.parametrize("plan", ["a b a D b a", "a a D b a"])
def test_after_a_delete_a_step_counts_from_the_other_gateways_reply_at_a_freed_index(tmp_path, clock, plan):
    """QA203 F1: a delete frees the indexes; B's reply stored at one A once held is B's,
    not A's: A's next step counts its gap from it, though the store's last index is not
    past those A knew."""
    (a, _), (b, _) = _two_gateways(tmp_path, clock)
    try:
        messages = [{"role": "user", "content": "plan a trip"}]
        for letter in plan.split():
            if letter == "D":
                delete_sessions(a.store_path, [("acme", "alt")])
            else:
                _ask(a if letter == "a" else b, clock, messages, session="alt")
        *_, before, last = list_steps(a.store_path, "acme", "alt")["data"]
        assert last["gap_s"] == 1.0 and last["prev_ended_s"] == before["ended_s"]
    finally:
        a.stop()
        b.stop()


def test_a_store_replaced_under_both_gateways_still_counts_from_the_other_gateways_reply(tmp_path, clock):
    """QA207 F1: the store's files deleted under A and B (each starts a new one there);
    a data_version of the old connection is never compared with the new one's: A's step
    after B's reply counts from it."""
    (a, _), (b, _) = _two_gateways(tmp_path, clock)
    try:
        messages = [{"role": "user", "content": "plan a trip"}]
        for tracer in (a, a):
            _ask(tracer, clock, messages, session="alt")
        for suffix in ("", "-wal", "-shm"):
            (tmp_path / f"traces.sqlite3{suffix}").unlink(missing_ok=True)
        for tracer in (a, b, a):
            _ask(tracer, clock, messages, session="alt")
        *_, before, last = list_steps(a.store_path, "acme", "alt")["data"]
        assert last["gap_s"] == 1.0 and last["prev_ended_s"] == before["ended_s"]
    finally:
        a.stop()
        b.stop()
