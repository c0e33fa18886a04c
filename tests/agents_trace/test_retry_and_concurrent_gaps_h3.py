"""A step's gap and tool run when a request is refused and retried (QA67 M2, QA68 #3), and
when a session's tool results arrive as concurrent requests (QA68 #4): one tool run is
one gap, one `execute_tool` span and one symbol for the forecaster; every step after a
tool run shows its gap, in the store, the spans, the stats and what the predictor learns."""
from __future__ import annotations

import json
import sqlite3

import pytest

from agents_trace.export import export_lines
from agents_trace.records import Step, StepResult, ToolCall
from agents_trace.sessions import SessionTable
from agents_trace.store_queries import find_session
from agents_trace.step_outcome import generated_nothing
from agents_trace.store_stats import StatsWindow, tenant_stats
from agents_trace.symbols import predictor_subscriber

from tests.agents_trace.helpers import SYSTEM, USER, ManualClock, ObservedPredictor, make_tracer, tool_call_message

NS = 1e9
SESSION = "retry-1"
HEADERS = {"x-session-id": SESSION}


@pytest.fixture
def clock():
    return ManualClock()


def _body(messages, model="tiny"):
    return {"model": model, "messages": list(messages)}


def _asks(*calls: tuple[str, str]) -> StepResult:
    return StepResult(num_input_tokens=100, num_output_tokens=10, finish_reason="tool_calls",
                      tool_calls=tuple(ToolCall(call_id, name, "{}") for call_id, name in calls))


def _answer() -> StepResult:
    return StepResult(num_input_tokens=120, num_output_tokens=5, finish_reason="stop", output_text="Done.")


def _rows(tmp_path, session=SESSION):
    with sqlite3.connect(tmp_path / "traces.sqlite3") as db:
        return db.execute("SELECT idx, after_label, arrived_s, ended_s, prev_ended_s, gap_s, error FROM steps "
                          "WHERE session = ? ORDER BY idx", (session,)).fetchall()


def _tool_spans(exporter):
    return [s for s in exporter.get_finished_spans()
            if s.attributes.get("gen_ai.operation.name") == "execute_tool"]


def _traced(tmp_path, clock):
    tracer, exporter = make_tracer(tmp_path, clock)
    predictor = ObservedPredictor()
    steps: list[Step] = []
    tracer.subscribe(lambda event: steps.append(event) if isinstance(event, Step) else None)
    tracer.subscribe(predictor_subscriber(predictor, clock))
    return tracer, exporter, predictor, steps


def _refused_then_retried(tracer, clock, error="model_not_found", tool_s=3.0, backoff_s=1.0):
    """Step 0 asks for slow_tool; the tool runs `tool_s`; the request with its result is
    refused; the client waits `backoff_s` and sends it again, which succeeds."""
    messages = [SYSTEM, USER]
    first = tracer.begin("acme", HEADERS, _body(messages))
    clock.advance(0.5)
    tracer.end(first, _asks(("call_s1", "slow_tool")))
    reply_ended_s = clock.now_s
    clock.advance(tool_s)
    messages = [*messages, tool_call_message("call_s1", "slow_tool"),
                {"role": "tool", "tool_call_id": "call_s1", "content": "ok"}]
    refused = tracer.begin("acme", HEADERS, _body(messages, "no-such-model"))
    clock.advance(0.01)
    tracer.end(refused, StepResult(num_input_tokens=0, error=error, error_message="refused"))
    clock.advance(backoff_s)
    retry = tracer.begin("acme", HEADERS, _body(messages))
    clock.advance(0.5)
    tracer.end(retry, _answer())
    return reply_ended_s, refused, retry


def test_a_refused_step_and_its_retry_are_one_tool_run_with_its_gap_from_the_reply(tmp_path, clock):
    tracer, exporter, predictor, steps = _traced(tmp_path, clock)
    try:
        reply_ended_s, refused, retry = _refused_then_retried(tracer, clock)
        assert tracer.flush(5.0)
        rows = _rows(tmp_path)
        assert [(r[0], r[1], r[6]) for r in rows] == [
            (0, "start", None), (1, "tool:slow_tool", "model_not_found"), (2, "tool:slow_tool", None)]
        # the refused step is no response: no gap; the retry's runs from step 0's reply
        assert rows[1][4:6] == (None, None)
        assert rows[2][4] == pytest.approx(reply_ended_s)
        assert rows[2][5] == pytest.approx(4.01)   # the tool's 3 s, the refusal, the client's back-off
        # one execute_tool span, from the reply to the retry
        [span] = _tool_spans(exporter)
        assert span.attributes["stepahead.step.index"] == 2
        assert span.start_time / NS == pytest.approx(reply_ended_s)
        assert span.end_time / NS == pytest.approx(retry.arrived_s)
        # the predictor gets slow_tool once, with that gap; the refused step leaves its wait alone
        assert predictor.seen == [("USER", None), ("slow_tool", pytest.approx(4.01)), ("ASSISTANT_TEXT", None)]
        assert predictor.waits == [(pytest.approx(reply_ended_s), ("slow_tool",)),
                                   (pytest.approx(clock.now_s), ())]
        # stats count one tool gap, the export's line the same gap
        [row] = tenant_stats(tracer.store_path, StatsWindow(tenant="acme"))["tenants"]
        assert row["tool_gap_p50_s"] == pytest.approx(4.01)
        lines = [json.loads(line) for line in export_lines(tracer.store_path, "acme", SESSION)][1:]
        assert [line["after"] for line in lines] == ["start", "tool:slow_tool"]
        assert lines[1]["gap_s"] == pytest.approx(4.01)
    finally:
        tracer.stop()


def test_a_rate_limited_user_turn_retried_keeps_one_user_symbol(tmp_path, clock):
    """The same for a user turn refused by its tenant's limits (429) and sent again."""
    tracer, _, predictor, _ = _traced(tmp_path, clock)
    try:
        messages = [SYSTEM, USER]
        first = tracer.begin("acme", HEADERS, _body(messages))
        clock.advance(0.5)
        tracer.end(first, _answer())
        clock.advance(10.0)
        messages = [*messages, {"role": "assistant", "content": "Done."}, {"role": "user", "content": "More."}]
        for result in (StepResult(error="rate_limit_exceeded"), _answer()):
            ctx = tracer.begin("acme", HEADERS, _body(messages))
            clock.advance(0.5)
            tracer.end(ctx, result)
            clock.advance(2.0)
        assert tracer.flush(5.0)
        assert [s for s, _ in predictor.seen] == ["USER", "ASSISTANT_TEXT", "USER", "ASSISTANT_TEXT"]
        assert predictor.seen[2][1] == pytest.approx(12.5)   # 10 s + the refusal + 2 s back-off
        assert [r[5] for r in _rows(tmp_path)][1:] == [None, pytest.approx(12.5)]
    finally:
        tracer.stop()


def test_a_step_cut_part_way_is_a_response_its_retry_repeats_its_tool_run(tmp_path, clock):
    """A step that generated tokens before it failed (a client gone mid-stream) ends the
    tool run; the SDK's retry of the same request carries results that step carried: no
    tool ran in between (QA218 F1), so it has no gap, no `execute_tool` span, no tool
    symbol and adds no tool run; the step after it counts from its end."""
    tracer, exporter, predictor, _ = _traced(tmp_path, clock)
    try:
        messages = [SYSTEM, USER]
        first = tracer.begin("acme", HEADERS, _body(messages))
        clock.advance(0.5)
        tracer.end(first, _asks(("call_s1", "slow_tool")))
        clock.advance(3.0)
        messages = [*messages, tool_call_message("call_s1", "slow_tool"),
                    {"role": "tool", "tool_call_id": "call_s1", "content": "ok"}]
        cut = tracer.begin("acme", HEADERS, _body(messages))
        clock.advance(0.5)
        tracer.end(cut, StepResult(num_input_tokens=120, num_output_tokens=3, error="client_closed",
                                   output_text="Wor"))
        clock.advance(1.0)
        retry = tracer.begin("acme", HEADERS, _body(messages))
        assert (retry.gap_s, retry.prev_ended_s, retry.repeats_tool_runs) == (None, None, True)
        clock.advance(0.5)
        tracer.end(retry, _asks(("call_s2", "slow_tool")))
        clock.advance(2.0)
        messages = [*messages, tool_call_message("call_s2", "slow_tool"),
                    {"role": "tool", "tool_call_id": "call_s2", "content": "ok"}]
        after = tracer.begin("acme", HEADERS, _body(messages))
        assert after.gap_s == pytest.approx(2.0) and not after.repeats_tool_runs   # a new run
        tracer.end(after, _answer())
        assert tracer.flush(5.0)
        rows = _rows(tmp_path)
        assert [r[1] for r in rows] == ["start", "tool:slow_tool", "tool:slow_tool", "tool:slow_tool"]
        assert [r[5] for r in rows] == [None, pytest.approx(3.0), None, pytest.approx(2.0)]
        assert [s.attributes["gen_ai.tool.call.id"] for s in _tool_spans(exporter)] == ["call_s1", "call_s2"]
        assert [s for s, _ in predictor.seen] == ["USER", "slow_tool", "slow_tool", "ASSISTANT_TEXT"]
        [session] = find_session(tracer.store_path, SESSION, "acme")
        assert (session["num_steps"], session["num_tool_runs"]) == (4, 2)
    finally:
        tracer.stop()


def test_a_retry_carrying_a_new_result_beside_a_carried_one_is_a_tool_run(tmp_path, clock):
    """Only a request whose results were all carried already repeats: one answering a call
    the cut step did not (a parallel call's result sent late) counts its run."""
    tracer, _, _, _ = _traced(tmp_path, clock)
    try:
        messages = [SYSTEM, USER]
        first = tracer.begin("acme", HEADERS, _body(messages))
        clock.advance(0.5)
        tracer.end(first, _asks(("call_a", "slow_tool"), ("call_b", "fast_tool")))
        clock.advance(1.0)
        one = [*messages, tool_call_message("call_a", "slow_tool"),
               {"role": "tool", "tool_call_id": "call_a", "content": "ok"}]
        cut = tracer.begin("acme", HEADERS, _body(one))
        clock.advance(0.5)
        tracer.end(cut, StepResult(num_input_tokens=120, num_output_tokens=3, error="client_closed"))
        both = [*one, {"role": "tool", "tool_call_id": "call_b", "content": "ok"}]
        retry = tracer.begin("acme", HEADERS, _body(both))
        assert not retry.repeats_tool_runs and retry.gap_s is not None
        tracer.end(retry, _answer())
    finally:
        tracer.stop()


def test_concurrent_tool_results_each_get_the_gap_from_the_reply_that_asked(tmp_path, clock):
    tracer, exporter, predictor, steps = _traced(tmp_path, clock)
    calls = [(f"call_p{k}", f"par_{k}") for k in range(3)]
    try:
        messages = [SYSTEM, USER]
        first = tracer.begin("acme", HEADERS, _body(messages))
        clock.advance(0.5)
        tracer.end(first, _asks(*calls))
        reply_ended_s = clock.now_s
        clock.advance(2.0)
        asked = {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
            for call_id, name in calls]}
        contexts = []
        for k, (call_id, _) in enumerate(calls):   # sent at once: all three in flight together
            contexts.append(tracer.begin("acme", HEADERS, _body(
                [*messages, asked, {"role": "tool", "tool_call_id": call_id, "content": "ok"}])))
            clock.advance(0.01)
        assert [c.gap_s for c in contexts] == pytest.approx([2.0, 2.01, 2.02])
        assert [c.prev_ended_s for c in contexts] == pytest.approx([reply_ended_s] * 3)
        for ctx in reversed(contexts):   # they end in any order
            clock.advance(0.3)
            tracer.end(ctx, _answer())
        assert tracer.flush(5.0)
        rows = _rows(tmp_path)
        assert [r[1] for r in rows] == ["start", "tool:par_0", "tool:par_1", "tool:par_2"]
        assert [r[5] for r in rows][1:] == pytest.approx([2.0, 2.01, 2.02])
        spans = sorted(_tool_spans(exporter), key=lambda s: s.attributes["stepahead.step.index"])
        assert [s.name for s in spans] == ["execute_tool par_0", "execute_tool par_1", "execute_tool par_2"]
        assert all(s.start_time / NS == pytest.approx(reply_ended_s) for s in spans)
        # one symbol per tool that ran, each with its own run, as one request carrying all three
        tools_seen = sorted((s, g) for s, g in predictor.seen if s.startswith("par_"))
        assert tools_seen == [("par_0", pytest.approx(2.0)), ("par_1", pytest.approx(2.01)),
                              ("par_2", pytest.approx(2.02))]
        [row] = tenant_stats(tracer.store_path, StatsWindow(tenant="acme"))["tenants"]
        assert (row["steps_after_tools"], row["tool_gap_p50_s"]) == (3, pytest.approx(2.01))
    finally:
        tracer.stop()


def test_a_refused_step_ending_first_leaves_a_concurrent_steps_reply_the_head():
    """Two steps of one session in flight; the later one is refused and ends first. The
    earlier one's reply stays the session's last response, with the calls it asked for:
    the next request's gap runs from it and its tool is named from those calls."""
    table = SessionTable(idle_timeout_s=60, max_sessions=10)
    one = [{"role": "user", "content": "go"}]
    first, _ = table.open_step("t", ("s", "header"), [b"a"], one, 0.0)
    second, _ = table.open_step("t", ("s", "header"), [b"b"], one, 0.1)
    table.close_step("t", "s", second.index, 0.2, request_digest=None, num_messages=1,
                     response_digest=None, asked={}, is_response=False)
    table.close_step("t", "s", first.index, 1.0, request_digest=b"a", num_messages=1,
                     response_digest=b"r", asked={"call_1": "ls"})
    state = table.get("t", "s")
    assert (state.head_index, state.last_ended_s, state.last_asked) == (0, 1.0, {"call_1": "ls"})
    following, _ = table.open_step("t", ("s", "header"), [b"c"], one, 3.0)
    assert (following.prev_ended_s, following.asked) == (1.0, {"call_1": "ls"})


def test_generated_nothing_is_a_failure_with_no_output_token_and_no_call():
    assert generated_nothing(StepResult(error="model_not_found"))
    assert generated_nothing(StepResult(num_input_tokens=900, error="rate_limit_exceeded"))
    assert not generated_nothing(StepResult())
    assert not generated_nothing(StepResult(num_output_tokens=2, error="client_closed"))
    assert not generated_nothing(StepResult(error="client_closed", tool_calls=(ToolCall("c", "ls"),)))


def test_a_refused_first_step_after_a_restart_leaves_the_stored_gap_to_its_retry(tmp_path, clock):
    """After a restart the session table knows no response of the session: the retry of a
    refused step gets the gap from the last step stored before the restart, not the
    refused one."""
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        messages = [SYSTEM, USER]
        first = tracer.begin("acme", HEADERS, _body(messages))
        clock.advance(0.5)
        tracer.end(first, _asks(("call_s1", "slow_tool")))
        stored_ended_s = clock.now_s
    finally:
        tracer.stop()
    clock.advance(5.0)
    restarted, exporter, predictor, _ = _traced(tmp_path, clock)
    try:
        _refused_then_retried_after(restarted, clock, messages)
        assert restarted.flush(5.0)
        rows = _rows(tmp_path)
        assert [(r[4], r[5]) for r in rows][1:] == [
            (None, None), (pytest.approx(stored_ended_s), pytest.approx(6.01))]
        [span] = _tool_spans(exporter)
        assert span.start_time / NS == pytest.approx(stored_ended_s)
        assert [s for s in predictor.seen if s[0] == "slow_tool"] == [("slow_tool", pytest.approx(6.01))]
    finally:
        restarted.stop()


def _refused_then_retried_after(tracer, clock, messages) -> None:
    """The request answering step 0's call is refused, then sent again 1 s later."""
    messages = [*messages, tool_call_message("call_s1", "slow_tool"),
                {"role": "tool", "tool_call_id": "call_s1", "content": "ok"}]
    refused = tracer.begin("acme", HEADERS, _body(messages, "no-such-model"))
    clock.advance(0.01)
    tracer.end(refused, StepResult(error="model_not_found"))
    clock.advance(1.0)
    retry = tracer.begin("acme", HEADERS, _body(messages))
    clock.advance(0.5)
    tracer.end(retry, _answer())
