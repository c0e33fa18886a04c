"""A named session continued across a restart: its first step after the restart gets
the gap since the last step stored before it (the tool's run, or the user's turn), in its
stored row, its spans and what the forecasters observe (QA51 #4)."""
from __future__ import annotations

import sqlite3

import pytest

from agents_trace.records import Step, StepResult, ToolCall
from agents_trace.symbols import predictor_subscriber

from tests.agents_trace.helpers import SYSTEM, USER, ManualClock, ObservedPredictor, make_tracer, tool_call_message

NS = 1e9
HEADERS = {"x-session-id": "trip"}


@pytest.fixture
def clock():
    return ManualClock()


def _step(tracer, clock, messages, result: StepResult, llm_s: float = 0.5):
    ctx = tracer.begin("acme", HEADERS, {"model": "tiny", "messages": list(messages)})
    clock.advance(llm_s)
    tracer.end(ctx, result)
    return ctx


def _asks(call_id: str, name: str) -> StepResult:
    return StepResult(num_input_tokens=100, num_output_tokens=10, finish_reason="tool_calls",
                      tool_calls=(ToolCall(call_id, name, "{}"),))


def _answered(messages: list, call_id: str, name: str) -> list:
    return [*messages, tool_call_message(call_id, name), {"role": "tool", "tool_call_id": call_id, "content": "ok"}]


def _rows(tmp_path):
    with sqlite3.connect(tmp_path / "traces.sqlite3") as db:
        return db.execute("SELECT idx, after_label, arrived_s, ended_s, prev_ended_s, gap_s FROM steps "
                          "WHERE session = 'trip' ORDER BY idx").fetchall()


def test_the_first_step_after_a_restart_gets_the_tool_runs_gap_from_the_store(tmp_path, clock):
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        messages = [SYSTEM, USER]
        _step(tracer, clock, messages, _asks("call_w1", "get_weather"))
        clock.advance(2.0)
        messages = _answered(messages, "call_w1", "get_weather")
        _step(tracer, clock, messages, _asks("call_b2", "book_table"))
        before_ended_s = clock.now_s
    finally:
        tracer.stop()   # the restart: the tool book_table runs meanwhile
    clock.advance(7.0)
    restarted, exporter = make_tracer(tmp_path, clock)
    steps: list[Step] = []
    observed = ObservedPredictor()
    restarted.subscribe(lambda event: steps.append(event) if isinstance(event, Step) else None)
    restarted.subscribe(predictor_subscriber(observed, clock))
    try:
        messages = _answered(messages, "call_b2", "book_table")
        after = _step(restarted, clock, messages, _asks("call_m3", "send_mail"))
        clock.advance(3.0)
        _step(restarted, clock, _answered(messages, "call_m3", "send_mail"), StepResult(
            num_input_tokens=300, num_output_tokens=5, finish_reason="stop", output_text="Done."))
        assert restarted.flush(5.0)
        spans = exporter.get_finished_spans()
    finally:
        restarted.stop()
    rows = _rows(tmp_path)
    assert [(r[0], r[1]) for r in rows] == [(0, "start"), (1, "tool:get_weather"), (2, "tool:book_table"),
                                            (3, "tool:send_mail")]
    assert rows[1][4:] == (rows[0][3], pytest.approx(2.0))
    assert rows[2][4] == rows[1][3] == before_ended_s   # the step before the restart
    assert rows[2][5] == pytest.approx(7.0)             # the tool's run, whole
    assert rows[3][4:] == (rows[2][3], pytest.approx(3.0))
    assert [(s.prev_ended_s, s.gap_s) for s in steps][0] == (before_ended_s, pytest.approx(7.0))
    assert observed.seen[0] == ("book_table", pytest.approx(7.0))   # what the predictor learns
    assert observed.seen[1] == ("send_mail", pytest.approx(3.0))
    tool = next(s for s in spans if s.name == "execute_tool book_table")
    assert tool.start_time == int(before_ended_s * NS) and tool.end_time == int(after.arrived_s * NS)


def test_a_retry_after_a_restart_counts_its_gap_from_the_reply_before_the_refused_step(tmp_path, clock):
    """QA71: reply asks for a tool, the next request is refused, the gateway restarts,
    the retry goes through: its gap runs from the reply, not from the refusal."""
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        messages = [SYSTEM, USER]
        _step(tracer, clock, messages, _asks("call_w1", "get_weather"))
        reply_ended_s = clock.now_s
        clock.advance(4.0)   # the tool runs
        messages = _answered(messages, "call_w1", "get_weather")
        _step(tracer, clock, messages, StepResult(num_input_tokens=0, error="rate_limit_exceeded"), llm_s=0.01)
    finally:
        tracer.stop()
    clock.advance(3.0)   # the client's back-off, the restart
    restarted, _ = make_tracer(tmp_path, clock)
    try:
        _step(restarted, clock, messages, StepResult(num_input_tokens=120, num_output_tokens=5,
                                                     finish_reason="stop", output_text="Sunny."))
        assert restarted.flush(5.0)
    finally:
        restarted.stop()
    rows = _rows(tmp_path)
    assert [(r[0], r[1]) for r in rows] == [(0, "start"), (1, "tool:get_weather"), (2, "tool:get_weather")]
    assert rows[1][4:] == (None, None)   # refused: no response, no gap
    assert rows[2][4] == reply_ended_s and rows[2][5] == pytest.approx(7.01)   # tool run + refusal + back-off


def test_a_user_turn_after_a_restart_gets_its_gap_and_a_new_start_none(tmp_path, clock):
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        messages = [SYSTEM, USER]
        _step(tracer, clock, messages, StepResult(num_input_tokens=50, num_output_tokens=5,
                                                  finish_reason="stop", output_text="Sunny."))
    finally:
        tracer.stop()
    clock.advance(11.0)
    for turn in range(2):   # a user turn continuing the conversation, then (restarted again) a new one
        restarted, _ = make_tracer(tmp_path, clock)
        try:
            if turn == 0:
                messages = [*messages, {"role": "assistant", "content": "Sunny."},
                            {"role": "user", "content": "And tomorrow?"}]
            else:
                messages = [SYSTEM, {"role": "user", "content": "Something else."}]
            _step(restarted, clock, messages, StepResult(num_input_tokens=60, num_output_tokens=5,
                                                         finish_reason="stop", output_text="Rain."))
        finally:
            restarted.stop()
        clock.advance(4.0)
    rows = _rows(tmp_path)
    assert [r[1] for r in rows] == ["start", "user", "start"]
    assert rows[1][4:] == (rows[0][3], pytest.approx(11.0))
    assert rows[2][4:] == (None, None)   # a new conversation under the same id: no wait to learn
