"""Replay hints: a token-id replay's recorded tool steps reach the tracer (and so the
predictor) when the request itself cannot show them; real evidence always wins."""
from __future__ import annotations

from agents_trace.records import After, Step, StepResult, ToolCall
from agents_trace.replay_hints import ReplayHint, hinted_after, replay_hint
from agents_trace.symbols import symbol_events

from tests.agents_trace.helpers import ManualClock, make_tracer, tool_call_message


def test_replay_hint_reads_tool_names_and_ignores_malformed_input():
    body = {"stepahead_replay": {"after_tools": ["ls", 3, ""], "tool_calls": ["grep", "cat"]}}
    assert replay_hint(body) == ReplayHint(("ls",), ("grep", "cat"))
    assert replay_hint({"stepahead_replay": ["ls"]}) == ReplayHint()
    assert replay_hint({"stepahead_replay": {"after_tools": "ls"}}) == ReplayHint()
    assert replay_hint({}) == ReplayHint()
    shown = After("tools", (ToolCall("c1", "cat"),))
    assert hinted_after(shown, ReplayHint(("ls",)), 2) is shown
    assert hinted_after(After("user"), ReplayHint(("ls", "cd")), 2) == After(
        "tools", (ToolCall("replay-2-0", "ls"), ToolCall("replay-2-1", "cd")))


def _steps_of(tracer) -> list[Step]:
    seen: list[Step] = []
    tracer.subscribe(lambda event: seen.append(event) if isinstance(event, Step) else None)
    return seen


def test_tracer_takes_the_hinted_steps_of_a_token_prompt(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        steps = _steps_of(tracer)
        headers = {"x-session-id": "replayed"}
        first = tracer.begin("acme", headers, {"model": "tiny", "prompt": [1, 2, 3],
                                               "stepahead_replay": {"tool_calls": ["grep"]}},
                             operation="text_completion")
        clock.advance(0.5)
        tracer.end(first, StepResult(num_input_tokens=3, finish_reason="length"))
        clock.advance(4.0)
        second = tracer.begin("acme", headers, {"model": "tiny", "prompt": [1, 2, 3, 4],
                                                "stepahead_replay": {"after_tools": ["grep"]}},
                              operation="text_completion")
        assert second.after.label == "tool:grep"
        clock.advance(0.5)
        tracer.end(second, StepResult(num_input_tokens=4, finish_reason="length"))
        assert tracer.flush(5.0)
        one, two = steps
        assert [call.name for call in one.tool_calls] == ["grep"] and not one.is_text_answer
        assert two.after.tool_names == ("grep",) and two.gap_s == 4.0 and two.is_text_answer
        symbols = [item.symbol for item in symbol_events(two, clock())]
        assert symbols == ["grep", "ASSISTANT_TEXT"]  # what the predictor learns from
    finally:
        tracer.stop()


def test_what_the_request_shows_wins_over_the_hint(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        steps = _steps_of(tracer)
        messages = [{"role": "user", "content": "list"}, tool_call_message("c1", "ls"),
                    {"role": "tool", "tool_call_id": "c1", "content": "a b"}]
        ctx = tracer.begin("acme", {"x-session-id": "s"}, {
            "model": "tiny", "messages": messages,
            "stepahead_replay": {"after_tools": ["grep"], "tool_calls": ["grep"]}})
        assert ctx.after.tool_names == ("ls",)
        tracer.end(ctx, StepResult(finish_reason="tool_calls", tool_calls=(ToolCall("c2", "cat"),)))
        failed = tracer.begin("acme", {"x-session-id": "t"}, {
            "model": "tiny", "prompt": [1], "stepahead_replay": {"tool_calls": ["grep"]}})
        tracer.end(failed, StepResult(error="server_error"))
        assert tracer.flush(5.0)
        shown, errored = steps
        assert [call.name for call in shown.tool_calls] == ["cat"]
        assert errored.tool_calls == ()  # a failed step called nothing
    finally:
        tracer.stop()


def test_step_hint_carries_the_records_after_tools_and_calls():
    from agents_trace.replay.runner import step_hint
    from cache.trace_format import TraceRecord

    assert step_hint(TraceRecord(0.0, 10, 1, after="tool:ls,tool:cd", tool_calls=["cat"])) == {
        "after_tools": ["ls", "cd"], "tool_calls": ["cat"]}
    assert step_hint(TraceRecord(0.0, 10, 1, after="user")) is None
