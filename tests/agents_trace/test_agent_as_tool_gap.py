"""An agent as a tool under one session id (QA91 D1): the sub-agent's model calls come
inside the orchestrator's tool run, so the run (its gap, its `execute_tool` span) counts
from the reply that asked for the tool; the sub-agent's calls are steps of their own (a
first one `user`, its gap from the last reply, as any new conversation under the id)."""
from __future__ import annotations

import pytest

from agents_trace.records import Step, StepResult, ToolCall

from tests.agents_trace.helpers import ManualClock, make_tracer, tool_call_message

HEADERS = {"x-session-id": "astool-1"}
ORCH = [{"role": "system", "content": "Use the translate tool."},
        {"role": "user", "content": "Translate 'good morning'"}]
SUB = [{"role": "system", "content": "Translate the text to French."},
       {"role": "user", "content": "good morning"}]


def _step(tracer, clock, messages, result, llm_s=0.5, headers=HEADERS):
    ctx = tracer.begin("acme", headers, {"model": "tiny", "messages": list(messages)})
    clock.advance(llm_s)
    tracer.end(ctx, result)
    return ctx


def _asks(call_id, name):
    return StepResult(num_input_tokens=50, num_output_tokens=10, finish_reason="tool_calls",
                      tool_calls=(ToolCall(call_id, name, "{}"),))


TEXT = StepResult(num_input_tokens=40, num_output_tokens=8, finish_reason="stop", output_text="Bonjour")


def _result(call_id, name, text):
    return [tool_call_message(call_id, name), {"role": "tool", "tool_call_id": call_id, "content": text}]


def _run(tmp_path, sub_agent):
    """Orchestrator asks `translate`; `sub_agent(tracer, clock)` runs the sub-agent's
    calls; then the orchestrator gets the result. Returns the stored Steps and spans."""
    clock = ManualClock()
    tracer, exporter = make_tracer(tmp_path, clock)
    steps: list[Step] = []
    tracer.subscribe(lambda event: steps.append(event) if isinstance(event, Step) else None)
    try:
        _step(tracer, clock, ORCH, _asks("call_t1", "translate"))
        asked_end = clock.now_s
        clock.advance(0.2)
        sub_agent(tracer, clock)
        clock.advance(0.1)
        _step(tracer, clock, ORCH + _result("call_t1", "translate", "Bonjour"), TEXT)
        tracer.end_all_sessions()
        assert tracer.flush(5.0)
    finally:
        tracer.stop()
    return asked_end, sorted(steps, key=lambda s: s.index), exporter.get_finished_spans()


def test_astool_tool_run_counts_from_the_reply_that_asked(tmp_path):
    asked_end, steps, spans = _run(tmp_path, lambda tracer, clock: _step(tracer, clock, SUB, TEXT))
    assert [s.session for s in steps] == ["astool-1"] * 3
    sub, answered = steps[1], steps[2]
    # the tool ran from the orchestrator's reply (step 0) to the request carrying its result:
    # 0.2 s before the sub-agent's call, its 0.5 s, 0.1 s after it
    assert answered.gap_s == pytest.approx(0.8)
    assert answered.prev_ended_s == pytest.approx(asked_end)
    assert [s.after.label for s in steps] == ["start", "user", "tool:translate"]
    assert sub.gap_s == pytest.approx(0.2) and sub.prev_ended_s == pytest.approx(asked_end)
    tools = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    assert [s.name for s in tools] == ["execute_tool translate"]
    assert tools[0].start_time == int(asked_end * 1e9)
    assert (tools[0].end_time - tools[0].start_time) / 1e9 == pytest.approx(0.8, abs=1e-6)
    chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert [s.attributes["stepahead.step.after"] for s in chats] == ["start", "user", "tool:translate"]


def test_astool_sub_agent_with_its_own_tool(tmp_path):
    """The sub-agent calls a tool of its own: that run counts from the sub-agent's reply,
    the orchestrator's still from its own."""
    ends = {}

    def sub_agent(tracer, clock):
        _step(tracer, clock, SUB, _asks("call_l1", "lookup"))
        ends["lookup"] = clock.now_s
        clock.advance(0.3)
        _step(tracer, clock, SUB + _result("call_l1", "lookup", "bonjour"), TEXT)
        clock.advance(0.05)
        _step(tracer, clock, [{"role": "user", "content": "Is 'Bonjour' polite?"}], TEXT)   # a guardrail agent

    asked_end, steps, _ = _run(tmp_path, sub_agent)
    assert steps[2].prev_ended_s == pytest.approx(ends["lookup"]) and steps[2].gap_s == pytest.approx(0.3)
    assert steps[4].gap_s == pytest.approx(0.2 + 0.5 + 0.3 + 0.5 + 0.05 + 0.5 + 0.1)
    assert steps[4].prev_ended_s == pytest.approx(asked_end)
    assert [s.after.label for s in steps] == ["start", "user", "tool:lookup", "user", "tool:translate"]


def test_user_turns_in_a_named_session_keep_their_gaps(tmp_path):
    """A new conversation under the session id is a user turn, its gap from the last reply;
    a user turn extending the conversation is one even with calls pending (the agent
    dropped them), also its gap from the last reply (QA100: such turns lost their gaps)."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    steps: list[Step] = []
    tracer.subscribe(lambda event: steps.append(event) if isinstance(event, Step) else None)
    try:
        _step(tracer, clock, ORCH, TEXT)
        clock.advance(2.0)
        _step(tracer, clock, SUB, _asks("call_x", "lookup"))
        clock.advance(1.0)
        _step(tracer, clock, SUB + [{"role": "user", "content": "never mind"}], TEXT)
        tracer.end_all_sessions()
        assert tracer.flush(5.0)
    finally:
        tracer.stop()
    assert [s.after.label for s in steps] == ["start", "user", "user"]
    assert [s.gap_s for s in steps[1:]] == pytest.approx([2.0, 1.0])
