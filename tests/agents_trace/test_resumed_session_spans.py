"""A named session that ended (idle, or a restart) and is resumed: each stretch gets its own
`invoke_agent` span whose `stepahead.session.num_steps` and usage totals count its own
steps (its chat children), and whose tool spans never start before it."""
from __future__ import annotations


import pytest

from agents_trace.records import StepResult, ToolCall

from tests.agents_trace.helpers import SYSTEM, USER, ManualClock, idle_out, make_tracer, tool_call_message

NS = 1e9
HEADERS = {"x-session-id": "trip"}


@pytest.fixture
def clock():
    return ManualClock()


def _by_op(spans, op):
    return [s for s in spans if s.attributes.get("gen_ai.operation.name") == op]


def _step(tracer, clock, messages, result: StepResult, llm_s: float = 0.5):
    ctx = tracer.begin("acme", HEADERS, {"model": "tiny", "messages": list(messages)})
    clock.advance(llm_s)
    tracer.end(ctx, result)
    return ctx


def _children(spans, parent):
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def _assert_counts_its_own_steps(spans, agent) -> None:
    chats = _by_op(_children(spans, agent), "chat")
    attributes = agent.attributes
    assert attributes["stepahead.session.num_steps"] == len(chats)
    for key in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
                "gen_ai.usage.cache_read.input_tokens"):
        assert attributes[key] == sum(chat.attributes[key] for chat in chats)


def test_a_session_resumed_after_an_idle_end_counts_only_its_own_steps_and_starts_with_its_tool(tmp_path, clock):
    """Step 0 asks for a tool that runs past the idle timeout: the session ends idle; the
    tool's result resumes it (steps 1 and 2, a new span in a new trace)."""
    tracer, exporter = make_tracer(tmp_path, clock, sweep_interval_s=0.02, session_idle_timeout_s=60.0)
    try:
        messages = [SYSTEM, USER]
        _step(tracer, clock, messages, StepResult(
            num_input_tokens=100, num_output_tokens=20, finish_reason="tool_calls",
            tool_calls=(ToolCall("call_w1", "get_weather", "{}"),)))
        first_ended_s = clock.now_s
        idle_out(tracer, clock, 61.0)
        clock.advance(4.0)   # the tool ran 65 s in all
        messages += [tool_call_message("call_w1", "get_weather"),
                     {"role": "tool", "tool_call_id": "call_w1", "content": "sunny"}]
        resumed = _step(tracer, clock, messages, StepResult(
            num_input_tokens=200, num_cached_tokens=80, num_output_tokens=20, finish_reason="tool_calls",
            tool_calls=(ToolCall("call_b2", "book_table", "{}"),)))
        clock.advance(2.0)
        messages += [tool_call_message("call_b2", "book_table"),
                     {"role": "tool", "tool_call_id": "call_b2", "content": "booked"}]
        _step(tracer, clock, messages, StepResult(num_input_tokens=300, num_cached_tokens=160,
                                                  num_output_tokens=12, finish_reason="stop", output_text="Done."))
        tracer.end_all_sessions()
        assert tracer.flush(5.0)
        spans = exporter.get_finished_spans()
    finally:
        tracer.stop()
    agents = sorted(_by_op(spans, "invoke_agent"), key=lambda s: s.start_time)
    assert len(agents) == 2 and agents[0].context.trace_id != agents[1].context.trace_id
    assert [a.attributes["stepahead.session.end_reason"] for a in agents] == ["idle", "shutdown"]
    assert [a.attributes["stepahead.session.num_steps"] for a in agents] == [1, 2]
    for agent in agents:
        _assert_counts_its_own_steps(spans, agent)
    indexes = [c.attributes["stepahead.step.index"] for c in _by_op(_children(spans, agents[1]), "chat")]
    assert sorted(indexes) == [1, 2]   # the session's numbering goes on
    # the tool run that spans the idle end: whole, under the resumed span, which starts with it
    tool = next(s for s in _by_op(spans, "execute_tool") if s.attributes["gen_ai.tool.name"] == "get_weather")
    assert tool.parent.span_id == agents[1].context.span_id
    assert tool.start_time >= agents[1].start_time
    assert tool.start_time == agents[1].start_time == agents[0].end_time == int(first_ended_s * NS)
    assert tool.end_time == int(resumed.arrived_s * NS)   # not clipped: as long as the step's gap
    for child in _children(spans, agents[1]):
        assert agents[1].start_time <= child.start_time and child.end_time <= agents[1].end_time


def test_a_session_resumed_after_a_user_turn_starts_at_its_request(tmp_path, clock):
    tracer, exporter = make_tracer(tmp_path, clock, sweep_interval_s=0.02, session_idle_timeout_s=60.0)
    try:
        for turn in range(3):
            ctx = _step(tracer, clock, [{"role": "user", "content": f"turn {turn}"}], StepResult(
                num_input_tokens=25, num_output_tokens=4, finish_reason="stop", output_text="ok"))
            idle_out(tracer, clock, 61.0)
        spans = exporter.get_finished_spans()
    finally:
        tracer.stop()
    agents = sorted(_by_op(spans, "invoke_agent"), key=lambda s: s.start_time)
    assert [a.attributes["stepahead.session.num_steps"] for a in agents] == [1, 1, 1]
    for agent in agents:
        _assert_counts_its_own_steps(spans, agent)
    assert agents[-1].start_time == int(ctx.arrived_s * NS)
    assert not _by_op(spans, "execute_tool")


def test_a_session_resumed_after_a_restart_counts_only_its_own_steps(tmp_path, clock):
    """The same meaning whatever ended the session: a restart (the store continues the
    numbering) as an idle end."""
    for run, turns in enumerate(((0, 1), (2,))):
        tracer, exporter = make_tracer(tmp_path, clock)
        try:
            for turn in turns:
                _step(tracer, clock, [{"role": "user", "content": f"turn {turn}"}], StepResult(
                    num_input_tokens=25, num_output_tokens=4, finish_reason="stop", output_text="ok"))
                clock.advance(3.0)
            tracer.end_all_sessions()
            assert tracer.flush(5.0)
            spans = exporter.get_finished_spans()
        finally:
            tracer.stop()
        [agent] = _by_op(spans, "invoke_agent")
        assert agent.attributes["stepahead.session.num_steps"] == len(turns)
        _assert_counts_its_own_steps(spans, agent)
        assert [c.attributes["stepahead.step.index"] for c in _by_op(spans, "chat")] == list(turns)
