"""A gateway killed (SIGKILL, OOM) never ends its sessions' `invoke_agent` spans: the gateway
that ends those sessions in the store exports them, with the ids the dead one's chat and
tool spans name as their parent, its start, its own steps' totals, ended idle at the
session's last step; once, and never one a gateway ended itself."""
from __future__ import annotations

import sqlite3
import time
from contextlib import closing

import pytest

from agents_trace.records import After, SessionEnded, SessionId, Step, StepResult
from agents_trace.store import StepRow, TraceStore
from agents_trace.store_rows import SessionSpanIds
from agents_trace.store_queries import find_session

from tests.agents_trace.helpers import ManualClock, idle_out, make_tracer, run_scripted_session

IDLE_S = 10.0   # the idle timeout: a left-open session ends idle past 2 x IDLE_S


@pytest.fixture
def clock():
    return ManualClock()


def _by_op(spans, op):
    return [s for s in spans if s.attributes.get("gen_ai.operation.name") == op]


def _kill(tracer) -> None:
    """What SIGKILL leaves: the writer gone with its sessions open, no span ended."""
    tracer._writer.stop(5.0)


def _wait_for(exporter, count: int, timeout_s: float = 5.0) -> list:
    deadline = time.monotonic() + timeout_s
    while len(agents := _by_op(exporter.get_finished_spans(), "invoke_agent")) < count \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    return agents


def _successor(tmp_path, clock):
    """The gateway started on the same store once the dead one's sessions idled out."""
    tracer, exporter = make_tracer(tmp_path, clock, session_idle_timeout_s=IDLE_S, sweep_interval_s=0.02)
    clock.advance(2 * IDLE_S + 5.0)
    return tracer, exporter


def test_a_killed_gateways_session_gets_its_invoke_agent_span_from_the_gateway_that_ends_it(tmp_path, clock):
    dead, dead_exporter = make_tracer(tmp_path, clock, session_idle_timeout_s=IDLE_S)
    run_scripted_session(dead, clock, headers={"x-session-id": "k1", "x-agent-name": "planner"})
    assert dead.flush(5.0)
    _kill(dead)
    orphans = dead_exporter.get_finished_spans()
    chats, tools = _by_op(orphans, "chat"), _by_op(orphans, "execute_tool")
    assert (len(chats), len(tools), len(_by_op(orphans, "invoke_agent"))) == (3, 2, 0)
    [parent_id] = {s.parent.span_id for s in chats + tools}
    tracer, exporter = _successor(tmp_path, clock)
    try:
        [agent] = _wait_for(exporter, 1)
        assert (agent.context.trace_id, agent.context.span_id) == (chats[0].context.trace_id, parent_id)
        assert agent.parent is None and agent.name == "invoke_agent planner"
        assert agent.start_time == min(s.start_time for s in chats)
        assert agent.end_time == max(s.end_time for s in chats)   # the session's last step's end
        attributes = agent.attributes
        assert attributes["stepahead.session.end_reason"] == "idle"
        assert attributes["stepahead.session.num_steps"] == 3
        for key in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
                    "gen_ai.usage.cache_read.input_tokens"):
            assert attributes[key] == sum(chat.attributes[key] for chat in chats)
        assert (attributes["gen_ai.conversation.id"], attributes["stepahead.tenant"],
                attributes["gen_ai.agent.name"]) == ("k1", "acme", "planner")
        assert find_session(tracer.store_path, "k1", "acme")[0]["end_reason"] == "idle"
        time.sleep(0.1)   # more sweeps: handed over once
        assert len(_by_op(exporter.get_finished_spans(), "invoke_agent")) == 1
    finally:
        tracer.stop()


def test_the_recovered_span_stays_the_child_of_the_first_requests_traceparent(tmp_path, clock):
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    dead, dead_exporter = make_tracer(tmp_path, clock, session_idle_timeout_s=IDLE_S)
    run_scripted_session(dead, clock, headers={"x-session-id": "tp", "traceparent": f"00-{trace_id}-{parent_id}-01"})
    assert dead.flush(5.0)
    _kill(dead)
    [tool_parent] = {s.parent.span_id for s in _by_op(dead_exporter.get_finished_spans(), "execute_tool")}
    tracer, exporter = _successor(tmp_path, clock)
    try:
        [agent] = _wait_for(exporter, 1)
        assert f"{agent.context.trace_id:032x}" == trace_id and agent.context.span_id == tool_parent
        assert f"{agent.parent.span_id:016x}" == parent_id and agent.parent.is_remote
    finally:
        tracer.stop()


def test_a_resumed_sessions_recovered_span_counts_its_own_steps_and_an_ended_span_is_not_sent_again(
        tmp_path, clock):
    dead, dead_exporter = make_tracer(tmp_path, clock, session_idle_timeout_s=IDLE_S, sweep_interval_s=0.02)
    run_scripted_session(dead, clock, headers={"x-session-id": "r1"})
    idle_out(dead, clock, IDLE_S + 1.0)   # its first span ended (and exported) by its own gateway
    [first] = _by_op(dead_exporter.get_finished_spans(), "invoke_agent")
    ctx = dead.begin("acme", {"x-session-id": "r1"}, {"model": "tiny", "messages": [
        {"role": "user", "content": "and tomorrow?"}, {"role": "assistant", "content": "Booked."},
        {"role": "user", "content": "more"}]})
    clock.advance(0.5)
    dead.end(ctx, StepResult(num_input_tokens=40, num_cached_tokens=8, num_output_tokens=6,
                             finish_reason="stop", output_text="Rain."))
    assert dead.flush(5.0)
    _kill(dead)
    [resumed_chat] = [s for s in _by_op(dead_exporter.get_finished_spans(), "chat")
                      if s.context.trace_id != first.context.trace_id]
    tracer, exporter = _successor(tmp_path, clock)
    try:
        [agent] = _wait_for(exporter, 1)
        time.sleep(0.1)
        assert len(_by_op(exporter.get_finished_spans(), "invoke_agent")) == 1   # not the first one again
        assert agent.context.span_id == resumed_chat.parent.span_id
        assert agent.attributes["stepahead.session.num_steps"] == 1   # its own, not the session's 4
        assert (agent.attributes["gen_ai.usage.input_tokens"], agent.attributes["gen_ai.usage.cache_read.input_tokens"],
                agent.attributes["gen_ai.usage.output_tokens"]) == (40, 8, 6)
        assert find_session(tracer.store_path, "r1", "acme")[0]["num_steps"] == 4
    finally:
        tracer.stop()


def test_a_refused_step_adds_no_tokens_to_the_recovered_spans_totals(tmp_path, clock):
    dead, _ = make_tracer(tmp_path, clock, session_idle_timeout_s=IDLE_S)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    for result in (StepResult(num_input_tokens=30, num_output_tokens=4, worker="w0", finish_reason="stop"),
                   StepResult(num_input_tokens=26, error="rate_limit_exceeded")):
        ctx = dead.begin("acme", {"x-session-id": "lim"}, body)
        clock.advance(0.5)
        dead.end(ctx, result)
    assert dead.flush(5.0)
    _kill(dead)
    tracer, exporter = _successor(tmp_path, clock)
    try:
        [agent] = _wait_for(exporter, 1)
        assert agent.attributes["stepahead.session.num_steps"] == 2
        assert (agent.attributes["gen_ai.usage.input_tokens"], agent.attributes["gen_ai.usage.output_tokens"]) \
            == (30, 4)
    finally:
        tracer.stop()


def test_a_store_made_before_the_span_columns_gains_them_and_its_open_sessions_end_without_a_span(tmp_path):
    path = tmp_path / "traces.sqlite3"
    columns = ("span_trace_id", "span_id", "span_parent_id", "span_started_s", "span_num_steps",
               "span_input_tokens", "span_cached_tokens", "span_output_tokens")
    store = TraceStore(path, max_age_s=1e9, max_bytes=10**9)
    store.open()
    for column in columns:
        store.db.execute(f"ALTER TABLE sessions DROP COLUMN {column}")
    store.db.execute("INSERT INTO sessions (tenant, session, source, started_s, last_s, num_steps) "
                     "VALUES ('acme', 'old', 'header', 1.0, 2.0, 1)")   # an older gateway's open session
    store.close()
    store.open()
    try:
        with closing(sqlite3.connect(path)) as db:
            have = {row[1] for row in db.execute("PRAGMA table_info(sessions)")}
        assert set(columns) <= have
        spans = []
        assert store.end_abandoned(10.0, set(), spans) == 1 and spans == []
    finally:
        store.close()


def _row(own_index: int, at_s: float, ids: SessionSpanIds, opened_s: float | None) -> StepRow:
    step = Step("acme", SessionId("two"), own_index, "header", "chat", "m", None, at_s, at_s + 0.1, After("user"),
                None, None, 1, False, 10, 0, 2, 0.05, "w0", "stop", ())
    return StepRow(step, None, ids.trace_id, None, session_span=ids, span_opened_s=opened_s, span_tokens=(10, 0, 2))


def test_the_store_keeps_the_span_it_names_until_its_writer_ends_it_and_counts_its_steps_alone(tmp_path):
    """Two gateways serve one session, each with its own span: the store keeps naming the
    one it named first, with its own steps' totals (a live writer's end must still clear
    it, and a dead one's be handed over: QA149 F1), not the one opened after it; ended by
    its writer (that end not applying: the other stored a step since), it is no longer
    handed over, and the next span opened is named."""
    mine, theirs = SessionSpanIds("a" * 32, "1" * 16), SessionSpanIds("b" * 32, "2" * 16, "3" * 16)
    results = []
    for is_ended_by_its_writer in (False, True):
        store = TraceStore(tmp_path / f"{is_ended_by_its_writer}.sqlite3", max_age_s=1e9, max_bytes=10**9)
        store.open()
        try:
            store.write([_row(0, 1.0, theirs, 0.5), _row(1, 2.0, mine, 2.0), _row(2, 3.0, theirs, None),
                         _row(3, 4.0, mine, None), _row(4, 5.0, mine, None)], [])
            ended = SessionEnded("acme", SessionId("two"), 2, 3.1, "idle")   # theirs' last; mine stored some since
            store.write([_row(5, 6.0, mine if is_ended_by_its_writer else theirs, None)],
                        [ended] if is_ended_by_its_writer else [],
                        [("acme", "two", theirs.span_id)] if is_ended_by_its_writer else [])
            if is_ended_by_its_writer:
                opened = SessionSpanIds("c" * 32, "4" * 16)
                store.write([_row(6, 7.0, opened, 7.0), _row(7, 8.0, opened, None)], [])
            spans = []
            assert store.end_abandoned(100.0, set(), spans) == 1
            results.append(spans)
        finally:
            store.close()
    [left] = results[0]
    assert (left.ids, left.started_s, left.last_s) == (theirs, 0.5, 6.1)
    assert (left.num_steps, left.num_input_tokens, left.num_cached_tokens, left.num_output_tokens) == (3, 30, 0, 6)
    [opened_left] = results[1]
    assert (opened_left.ids.span_id, opened_left.started_s, opened_left.num_steps) == ("4" * 16, 7.0, 2)
