"""Tests for the diffs H3 proposes to files it could not edit (store_rows.py, writer.py,
export.py): a refused step and its retry are one tool run in the session's count, the
forecast made after the reply is checked against the retry, and concurrent steps
replay right after the step before them."""
from __future__ import annotations

import json

import pytest
from cache.forecast import Forecast

from agents_trace.export import export_lines
from agents_trace.store_queries import find_session
from agents_trace.step_queries import list_steps
from tests.agents_trace.helpers import ManualClock, make_tracer
from tests.agents_trace.test_retry_and_concurrent_gaps_h3 import SESSION, _refused_then_retried

from agents_trace.records import StepResult, ToolCall
from tests.agents_trace.helpers import SYSTEM, USER


def test_a_refused_step_and_its_retry_count_one_tool_run(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        _refused_then_retried(tracer, clock)
        assert tracer.flush(5.0)
        [session] = find_session(tracer.store_path, SESSION, "acme")
        assert (session["num_steps"], session["num_tool_runs"], session["num_errors"]) == (3, 1, 1)
    finally:
        tracer.stop()


def test_the_forecast_made_after_the_reply_is_checked_against_the_retry(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    tracer.set_forecaster(lambda tenant, session, now_s: Forecast(
        tenant, session, now_s, next_step={"slow_tool": 0.9, "END": 0.1}, eta_quantiles_s=((0.5, 3.0),)))
    try:
        _refused_then_retried(tracer, clock)
        assert tracer.flush(5.0)
        steps = list_steps(tracer.store_path, "acme", SESSION)["data"]
        assert [s["forecast"] is not None for s in steps] == [False, False, True]
        assert (steps[2]["forecast"]["actual"], steps[2]["forecast"]["is_hit"]) == ("slow_tool", True)
        [session] = find_session(tracer.store_path, SESSION, "acme")
        assert (session["num_forecasts"], session["num_forecast_hits"]) == (1, 1)
    finally:
        tracer.stop()


def test_concurrent_steps_replay_right_after_the_step_before_them(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    headers = {"x-session-id": "c"}
    calls = [(f"call_p{k}", f"par_{k}") for k in range(3)]
    try:
        ctx = tracer.begin("acme", headers, {"model": "tiny", "messages": [SYSTEM, USER]})
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=100, num_output_tokens=10,
                                   tool_calls=tuple(ToolCall(c, n, "{}") for c, n in calls)))
        clock.advance(2.0)
        asked = {"role": "assistant", "content": None, "tool_calls": [
            {"id": c, "type": "function", "function": {"name": n, "arguments": "{}"}} for c, n in calls]}
        contexts = [tracer.begin("acme", headers, {"model": "tiny", "messages": [
            SYSTEM, USER, asked, {"role": "tool", "tool_call_id": c, "content": "ok"}]}) for c, _ in calls]
        for c in contexts:
            clock.advance(0.5)
            tracer.end(c, StepResult(num_input_tokens=120, num_output_tokens=5, output_text="x"))
        assert tracer.flush(5.0)
        lines = [json.loads(line) for line in export_lines(tracer.store_path, "acme", "c")][1:]
        assert [line.get("gap_s") for line in lines] == [None, pytest.approx(2.0), 0.0, 0.0]
    finally:
        tracer.stop()
