"""What the tracer captures of a request besides its messages: a completions request's
prompt, a chat request's tools and tool_choice (content on), and nothing when off."""
from __future__ import annotations

import pytest

from agents_trace.records import StepResult
from agents_trace.step_queries import step_content

from tests.agents_trace.helpers import SYSTEM, USER, ManualClock, make_tracer

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
CHOICE = {"type": "function", "function": {"name": "get_weather"}}


def _one_step(tracer, clock, session: str, body: dict, operation: str = "chat") -> None:
    ctx = tracer.begin("acme", {"x-session-id": session}, body, operation=operation)
    clock.advance(0.5)
    tracer.end(ctx, StepResult(num_input_tokens=10, num_output_tokens=2, finish_reason="stop", output_text="ok"))


@pytest.mark.parametrize("prompt, expected", [
    ("Once upon a time", [{"role": "prompt", "content": "Once upon a time"}]),
    ([11, 12, 13], [{"role": "prompt", "token_ids": [11, 12, 13], "content": "3 token ids"}]),
    (["a", "b"], [{"role": "prompt", "content": "a"}, {"role": "prompt", "content": "b"}]),
])
def test_tracer_captures_a_completions_prompt(tmp_path, prompt, expected):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    try:
        _one_step(tracer, clock, "c", {"model": "tiny", "prompt": prompt}, operation="text_completion")
        assert tracer.flush(5.0)
        content = step_content(tracer.store_path, "acme", "c", 0)
        assert content["new_messages"] == expected and content["num_prefix_messages"] == 0
    finally:
        tracer.stop()


def test_a_completions_span_holds_its_text_prompts_as_user_messages(tmp_path):
    import json

    clock = ManualClock()
    tracer, exporter = make_tracer(tmp_path, clock, capture_content=True)
    try:
        for session, prompt in (("text", ["a", "b"]), ("ids", [11, 12, 13])):
            _one_step(tracer, clock, session, {"model": "tiny", "prompt": prompt}, operation="text_completion")
        assert tracer.flush(5.0)
        spans = [s for s in exporter.get_finished_spans() if s.name == "text_completion tiny"]
        assert json.loads(spans[0].attributes["gen_ai.input.messages"]) == [
            {"role": "user", "parts": [{"type": "text", "content": "a"}]},
            {"role": "user", "parts": [{"type": "text", "content": "b"}]}]
        assert "gen_ai.input.messages" not in spans[1].attributes   # token ids: no text to show (was "[]")
    finally:
        tracer.stop()


def test_tracer_captures_a_chat_requests_tools_after_its_messages_and_not_in_spans(tmp_path):
    clock = ManualClock()
    tracer, exporter = make_tracer(tmp_path, clock, capture_content=True)
    try:
        _one_step(tracer, clock, "t", {"model": "tiny", "messages": [SYSTEM, USER], "tools": TOOLS,
                                       "tool_choice": CHOICE})
        _one_step(tracer, clock, "plain", {"model": "tiny", "messages": [SYSTEM, USER]})
        _one_step(tracer, clock, "odd", {"model": "tiny", "messages": [USER], "tools": [1, None], "tool_choice": 5})
        assert tracer.flush(5.0)
        content = step_content(tracer.store_path, "acme", "t", 0)
        assert content["new_messages"] == [SYSTEM, USER, {"role": "tools", "tools": TOOLS, "tool_choice": CHOICE,
                                                          "content": "get_weather (tool_choice: get_weather)"}]
        assert step_content(tracer.store_path, "acme", "plain", 0)["new_messages"] == [SYSTEM, USER]
        assert step_content(tracer.store_path, "acme", "odd", 0)["new_messages"] == [   # kept as it came, never raised
            USER, {"role": "tools", "tools": [1, None], "tool_choice": 5, "content": "?, ? (tool_choice: 5)"}]
        [span, *_] = [s for s in exporter.get_finished_spans() if s.name == "chat tiny"]
        assert '"tools"' not in span.attributes["gen_ai.input.messages"]   # messages only
    finally:
        tracer.stop()


def test_tracer_keeps_the_prompt_and_tools_only_with_content_on(tmp_path):
    for capture in (True, False):
        clock = ManualClock()
        tracer, _ = make_tracer(tmp_path / str(capture), clock, capture_content=capture)
        try:
            _one_step(tracer, clock, "c", {"model": "tiny", "prompt": "secret"}, operation="text_completion")
            _one_step(tracer, clock, "t", {"model": "tiny", "messages": [USER], "tools": TOOLS})
            assert tracer.flush(5.0)
            kept = [step_content(tracer.store_path, "acme", session, 0) for session in ("c", "t")]
            if capture:
                assert [len(content["new_messages"]) for content in kept] == [1, 2]
            else:
                assert kept == [None, None]
        finally:
            tracer.stop()


def test_a_failed_step_keeps_the_output_it_had_sent_and_none_when_it_sent_none(tmp_path):
    """A stream its client cut keeps the text the client was sent; a failure that had sent
    nothing has no output, not an empty assistant message."""
    clock = ManualClock()
    tracer, exporter = make_tracer(tmp_path, clock, capture_content=True)
    try:
        for session, text in (("cut", "Once upon a"), ("failed", None)):
            ctx = tracer.begin("acme", {"x-session-id": session}, {"model": "tiny", "messages": [USER]})
            clock.advance(0.5)
            tracer.end(ctx, StepResult(num_input_tokens=10, num_output_tokens=3, output_text=text,
                                       error="client_closed", error_message="The client closed the connection."))
        assert tracer.flush(5.0)
        assert step_content(tracer.store_path, "acme", "cut", 0)["output"] == {
            "role": "assistant", "content": "Once upon a"}
        assert step_content(tracer.store_path, "acme", "failed", 0)["output"] is None
        cut, _ = [s for s in exporter.get_finished_spans() if s.name == "chat tiny"]
        assert cut.status.description == "The client closed the connection."
    finally:
        tracer.stop()


def test_qa213_responses_instructions_are_system_instructions_not_an_input_message(tmp_path):
    """QA213 F5: a Responses request's `instructions` went into `gen_ai.input.messages` as a
    system message; they go to `gen_ai.system_instructions` (a list of text parts), while a
    chat request's own system message stays in the history, and the store keeps both as sent."""
    import json

    instructions = {"role": "system", "content": "Be terse INSTR"}
    clock = ManualClock()
    tracer, exporter = make_tracer(tmp_path, clock, capture_content=True)
    try:
        for session, given in (("resp", "Be terse INSTR"), ("chat", None)):
            ctx = tracer.begin("acme", {"x-session-id": session}, {"model": "tiny", "messages": [instructions, USER]},
                               system_instructions=given)
            clock.advance(0.5)
            tracer.end(ctx, StepResult(num_input_tokens=10, num_output_tokens=2, finish_reason="stop",
                                       output_text="ok"))
        assert tracer.flush(5.0)
        resp, chat = [s for s in exporter.get_finished_spans() if s.name == "chat tiny"]
        assert json.loads(resp.attributes["gen_ai.system_instructions"]) == [
            {"type": "text", "content": "Be terse INSTR"}]
        assert json.loads(resp.attributes["gen_ai.input.messages"]) == [
            {"role": "user", "parts": [{"type": "text", "content": USER["content"]}]}]
        assert "gen_ai.system_instructions" not in chat.attributes
        assert [m["role"] for m in json.loads(chat.attributes["gen_ai.input.messages"])] == ["system", "user"]
        assert step_content(tracer.store_path, "acme", "resp", 0)["new_messages"] == [instructions, USER]
    finally:
        tracer.stop()


def test_qa213_tool_spans_carry_arguments_result_and_description_only_with_content_on(tmp_path):
    """QA213 F7: `execute_tool` spans had no `gen_ai.tool.call.arguments` / `…result` with
    capture on, nor `gen_ai.tool.description`; with capture off they must stay without."""
    from tests.agents_trace.helpers import run_scripted_session

    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                                               "parameters": {"type": "object"}}},
             {"type": "function", "function": {"name": "book_table", "parameters": {"type": "object"}}}]
    for capture in (True, False):
        clock = ManualClock()
        tracer, exporter = make_tracer(tmp_path / str(capture), clock, capture_content=capture)
        try:
            run_scripted_session(tracer, clock, headers={"x-session-id": "tools"}, body={"tools": tools})
            tracer.end_all_sessions()
            assert tracer.flush(5.0)
            weather, book = [dict(s.attributes) for s in exporter.get_finished_spans()
                             if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
            if capture:
                assert (weather["gen_ai.tool.call.arguments"], weather["gen_ai.tool.call.result"],
                        weather["gen_ai.tool.description"]) == (
                    '{"city": "Paris"}', "result of get_weather", "Weather for a city")
                assert (book["gen_ai.tool.call.arguments"], book["gen_ai.tool.call.result"]) == (
                    '{"where": "Paris"}', "result of book_table")
                assert "gen_ai.tool.description" not in book   # none offered
            else:
                for span in (weather, book):
                    assert not {"gen_ai.tool.call.arguments", "gen_ai.tool.call.result",
                                "gen_ai.tool.description"} & set(span)
        finally:
            tracer.stop()
