"""A step whose request is a new conversation (no earlier reply in its messages) starts
its session, `after` `start` with no gap, wherever the session table knows no response
of the session since it went live, though its index is past 0 (QA218 F4, F5): the retry
of a refused first step, and a named session's first step after an idle end (or a
delete, which leaves the table's dormant count). A live session's later user turns stay
`user`, whatever their messages."""
from __future__ import annotations

import sqlite3

import pytest

from agents_trace.records import StepResult

from tests.agents_trace.helpers import SYSTEM, USER, ManualClock, idle_out, make_tracer

HEADERS = {"x-session-id": "conv-1"}


@pytest.fixture
def clock():
    return ManualClock()


def _step(tracer, clock, messages, result: StepResult):
    ctx = tracer.begin("acme", HEADERS, {"model": "tiny", "messages": list(messages)})
    clock.advance(0.5)
    tracer.end(ctx, result)
    clock.advance(1.0)
    return ctx


def _answer() -> StepResult:
    return StepResult(num_input_tokens=20, num_output_tokens=3, finish_reason="stop", output_text="Hi.")


def _rows(tracer):
    assert tracer.flush(5.0)
    with sqlite3.connect(tracer.store_path) as db:
        return db.execute("SELECT idx, after_label, gap_s FROM steps ORDER BY idx").fetchall()


def test_the_retry_of_a_refused_first_step_is_the_start(tmp_path, clock):
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        refused = _step(tracer, clock, [SYSTEM, USER], StepResult(error="model_not_found", error_message="no"))
        retry = _step(tracer, clock, [SYSTEM, USER], _answer())
        later = _step(tracer, clock, [SYSTEM, USER], _answer())   # a live session's turn: user
        assert (refused.after.kind, retry.after.kind, later.after.kind) == ("start", "start", "user")
        assert _rows(tracer) == [(0, "start", None), (1, "start", None), (2, "user", pytest.approx(1.0))]
    finally:
        tracer.stop()


def test_a_new_conversation_after_an_idle_end_starts_with_no_gap(tmp_path, clock):
    tracer, _ = make_tracer(tmp_path, clock, sweep_interval_s=0.02, session_idle_timeout_s=60.0)
    try:
        first = [SYSTEM, USER]
        _step(tracer, clock, first, _answer())
        idle_out(tracer, clock, 61.0)
        again = _step(tracer, clock, [{"role": "user", "content": "again"}], _answer())
        assert (again.index, again.after.kind, again.gap_s, again.prev_ended_s) == (1, "start", None, None)
        idle_out(tracer, clock, 61.0)   # a conversation going on after an idle end keeps its gap
        going_on = _step(tracer, clock, [{"role": "user", "content": "again"},
                                         {"role": "assistant", "content": "Hi."}, USER], _answer())
        assert going_on.after.kind == "user" and going_on.gap_s == pytest.approx(62.0)
        assert _rows(tracer) == [(0, "start", None), (1, "start", None), (2, "user", pytest.approx(62.0))]
    finally:
        tracer.stop()
