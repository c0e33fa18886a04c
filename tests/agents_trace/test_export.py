"""Exports of captured content: a chat step's tools and tool_choice go with its messages,
a completions step never claims a chat, and every line reads back as the trace format."""
from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor

from agents_trace.export import export_lines, export_sessions_lines
from agents_trace.records import StepResult, ToolCall
from cache.trace_format import iter_trace

from tests.agents_trace.helpers import SYSTEM, USER, ManualClock, make_tracer, tool_call_message

TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in ("get_weather", "book_table")]


def _record_tool_session(tracer, clock) -> None:
    """Session "trip": two forced tool calls, then an answer with tool_choice "none"."""
    messages = [SYSTEM, USER]
    for call in (("call_w", "get_weather"), ("call_b", "book_table"), None):
        choice = {"type": "function", "function": {"name": call[1]}} if call else "none"
        ctx = tracer.begin("acme", {"x-session-id": "trip"},
                           {"model": "tiny", "messages": list(messages), "tools": TOOLS, "tool_choice": choice})
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=100, num_output_tokens=5, finish_reason="stop",
                                   output_text=None if call else "Done.",
                                   tool_calls=(ToolCall(call[0], call[1], "{}"),) if call else ()))
        clock.advance(1.0)
        if call:
            messages += [tool_call_message(call[0], call[1]),
                         {"role": "tool", "tool_call_id": call[0], "content": "ok"}]


def _record_completions(tracer, clock) -> None:
    """Session "c": a text prompt, then a token-id prompt, then one with nothing captured of it."""
    for prompt in ("Once upon a time", [5, 6, 7, 8], None):
        ctx = tracer.begin("acme", {"x-session-id": "c"}, {"model": "tiny", "prompt": prompt},
                           operation="text_completion")
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=4, num_output_tokens=2, finish_reason="length", output_text="xy"))


def test_export_of_a_tool_session_carries_each_steps_tools_and_tool_choice(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    _record_tool_session(tracer, clock)
    tracer.stop()
    text = "".join(export_lines(tracer.store_path, "acme", "trip"))
    lines = [json.loads(line) for line in text.splitlines()][1:]
    assert [len(line["messages"]) for line in lines] == [2, 4, 6]   # rebuilt exactly, no tools entry among them
    assert all(m["role"] in ("system", "user", "assistant", "tool") for line in lines for m in line["messages"])
    assert [line["tools"] for line in lines] == [TOOLS] * 3
    assert [line["tool_choice"] for line in lines] == [
        {"type": "function", "function": {"name": "get_weather"}},
        {"type": "function", "function": {"name": "book_table"}}, "none"]
    _, records = iter_trace(io.StringIO(text))
    assert [(r.tools, r.tool_choice) for r in records] == [(line["tools"], line["tool_choice"]) for line in lines]
    clock = ManualClock()   # without content: none of them
    tracer, _ = make_tracer(tmp_path / "off", clock)
    _record_tool_session(tracer, clock)
    tracer.stop()
    lines = [json.loads(line) for line in export_lines(tracer.store_path, "acme", "trip")][1:]
    assert len(lines) == 3 and not any(key in line for line in lines for key in ("messages", "tools", "tool_choice"))


def test_export_of_completions_steps_claims_no_messages(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    _record_completions(tracer, clock)
    _record_tool_session(tracer, clock)
    tracer.stop()
    text = "".join(export_sessions_lines(tracer.store_path, [("acme", "c"), ("acme", "trip")], "all"))
    lines = [json.loads(line) for line in text.splitlines()][1:]
    completions = [line for line in lines if line["session"] == "c"]
    assert len(completions) == 3
    assert not any(key in line for line in completions for key in ("messages", "tools", "tool_choice"))
    assert all("messages" in line for line in lines if line["session"] == "trip")
    _, records = iter_trace(io.StringIO(text))
    assert [r.messages for r in records if r.session == "c"] == [None] * 3


def test_a_session_whose_clock_stepped_back_exports_times_that_never_go_back(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    for step, then in enumerate((0.0, -5.0, 2.0)):   # the wall clock steps back 5 s after the first step
        clock.advance(then)
        ctx = tracer.begin("acme", {"x-session-id": "back"}, {"model": "tiny", "messages": [USER]})
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=10 + step, num_output_tokens=1, finish_reason="stop",
                                   output_text="x"))
    tracer.stop()
    text = "".join(export_lines(tracer.store_path, "acme", "back"))
    _, records = iter_trace(io.StringIO(text))   # the reader refuses times that go back
    assert [(r.t, r.input_tokens) for r in records] == [(0.0, 10), (0.0, 11), (0.0, 12)]


def test_the_merged_export_can_be_read_a_line_at_a_time_on_different_threads(tmp_path):
    """A streamed answer reads the lines on whichever thread of its pool is free (QA163: the
    export's spool refused a second thread, and the download stopped after its first chunk)."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    _record_tool_session(tracer, clock)
    _record_completions(tracer, clock)
    tracer.stop()
    keys = [("acme", "trip"), ("acme", "c")]
    whole = list(export_sessions_lines(tracer.store_path, keys, "two sessions"))
    lines = export_sessions_lines(tracer.store_path, keys, "two sessions")
    read = []
    for i in range(len(whole) + 1):
        with ThreadPoolExecutor(1, thread_name_prefix=f"reader-{i}") as pool:   # a new thread each time
            line = pool.submit(next, lines, None).result()
        if line is None:
            break
        read.append(line)
    assert read == whole and len(whole) == 1 + 6
