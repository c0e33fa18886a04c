"""A gateway killed (SIGKILL, OOM) and restarted, whose agent resumes its session with the
same `x-session-id` (QA149 F1): the `invoke_agent` span the dead gateway left open is
exported by the gateway that resumed it, once past the sweep's rule (idle timeout plus
margin), with its ids (its chat spans' parent), its own steps' totals, ended idle at its
last step; the resumed part keeps a span of its own, which the store then names. A span
another live gateway holds (one session served by two) is never exported by the other."""
from __future__ import annotations

import time

import pytest

from agents_trace.records import StepResult

from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session

IDLE_S = 10.0   # the idle timeout; a span left open is handed over idle past 2 x IDLE_S
NS = 1e9
BODY = {"model": "tiny", "messages": [{"role": "user", "content": "and tomorrow?"}]}


@pytest.fixture
def clock():
    return ManualClock()


def _agents(exporter) -> list:
    return [s for s in exporter.get_finished_spans() if s.attributes.get("gen_ai.operation.name") == "invoke_agent"]


def _chats(exporter) -> list:
    return [s for s in exporter.get_finished_spans() if s.attributes.get("gen_ai.operation.name") == "chat"]


def _wait_for(check, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check() and time.monotonic() < deadline:
        time.sleep(0.02)
    return check()


def _kill(tracer) -> None:
    """What SIGKILL leaves: the writer gone with its sessions open, no span ended."""
    tracer._writer.stop(5.0)


def _step(tracer, clock, session: str, input_tokens: int = 40) -> None:
    ctx = tracer.begin("acme", {"x-session-id": session}, BODY)
    clock.advance(0.5)
    tracer.end(ctx, StepResult(num_input_tokens=input_tokens, num_cached_tokens=8, num_output_tokens=6,
                               finish_reason="stop", output_text="Rain."))
    assert tracer.flush(5.0)


def _dead_session(tmp_path, clock, session: str):
    """A 3-step session on a gateway then killed: its chat spans and their parent's id."""
    dead, dead_exporter = make_tracer(tmp_path, clock, session_idle_timeout_s=IDLE_S)
    run_scripted_session(dead, clock, headers={"x-session-id": session, "x-agent-name": "planner"})
    assert dead.flush(5.0)
    _kill(dead)
    chats = _chats(dead_exporter)
    assert len(chats) == 3 and not _agents(dead_exporter)
    [parent_id] = {s.parent.span_id for s in chats}
    return chats, parent_id


def _assert_is_the_dead_span(agent, chats, parent_id) -> None:
    assert (agent.context.trace_id, agent.context.span_id) == (chats[0].context.trace_id, parent_id)
    assert agent.name == "invoke_agent planner" and agent.parent is None
    assert agent.start_time == min(s.start_time for s in chats)
    assert agent.end_time == max(s.end_time for s in chats)   # its last step, not the resumed ones
    attributes = agent.attributes
    assert attributes["stepahead.session.end_reason"] == "idle"
    assert attributes["stepahead.session.num_steps"] == 3
    for key in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.usage.cache_read.input_tokens"):
        assert attributes[key] == sum(chat.attributes[key] for chat in chats)


def _span_the_store_names(tmp_path, clock, tracer) -> object:
    """Kill `tracer`, and return the span a next gateway's sweep exports for its session."""
    _kill(tracer)
    third, exporter = make_tracer(tmp_path, clock, session_idle_timeout_s=IDLE_S, sweep_interval_s=0.02)
    try:
        clock.advance(2 * IDLE_S + 5.0)
        assert _wait_for(lambda: len(_agents(exporter)) == 1)
        return _agents(exporter)[0]
    finally:
        third.stop()


def test_a_session_resumed_right_after_a_restart_gets_the_killed_gateways_span_exported(tmp_path, clock):
    chats, parent_id = _dead_session(tmp_path, clock, "orph")
    clock.advance(3.0)   # a supervisor restarts the gateway; the agent retries with its x-session-id
    tracer, exporter = make_tracer(tmp_path, clock, session_idle_timeout_s=IDLE_S, sweep_interval_s=0.02)
    _step(tracer, clock, "orph")
    clock.advance(8.0)
    _step(tracer, clock, "orph", input_tokens=60)
    time.sleep(0.1)
    assert _agents(exporter) == []   # not yet: a live gateway holding it would end it itself
    clock.advance(9.0)   # its last step idle past the timeout and the margin; the resumed part is live
    assert _wait_for(lambda: len(_agents(exporter)) == 1), "the killed gateway's span was never exported"
    time.sleep(0.1)   # more sweeps: handed over once
    [agent] = _agents(exporter)
    _assert_is_the_dead_span(agent, chats, parent_id)
    resumed = _chats(exporter)
    [own_id] = {s.parent.span_id for s in resumed}
    assert len(resumed) == 2 and own_id != parent_id and tracer.num_live_sessions == 1
    left = _span_the_store_names(tmp_path, clock, tracer)   # the store now names the resumed part's span
    assert left.context.span_id == own_id
    assert left.attributes["stepahead.session.num_steps"] == 2
    assert (left.attributes["gen_ai.usage.input_tokens"], left.attributes["gen_ai.usage.output_tokens"]) == (100, 12)


def test_a_session_resumed_long_after_a_crash_exports_the_left_open_span_before_its_own(tmp_path, clock):
    """No sweep ended it before the resume (no gateway ran meanwhile): the opening hands it
    over at once, and the resumed step's span is the one the store names."""
    chats, parent_id = _dead_session(tmp_path, clock, "late")
    tracer, exporter = make_tracer(tmp_path, clock, session_idle_timeout_s=IDLE_S, sweep_interval_s=3600.0)
    assert tracer.flush(5.0)   # its first sweep is done: no other before the step
    clock.advance(2 * IDLE_S + 5.0)
    _step(tracer, clock, "late")
    [agent] = _agents(exporter)
    _assert_is_the_dead_span(agent, chats, parent_id)
    [resumed] = _chats(exporter)
    assert resumed.parent.span_id != parent_id
    left = _span_the_store_names(tmp_path, clock, tracer)
    assert (left.context.span_id, left.attributes["stepahead.session.num_steps"]) == (resumed.parent.span_id, 1)
    assert left.attributes["gen_ai.usage.input_tokens"] == 40


def test_a_span_another_live_gateway_holds_is_exported_by_that_gateway_alone(tmp_path, clock):
    """Two gateways on one store serve one session: B opens it while A holds its span and
    goes on adding steps past B's margin; B never exports A's span (A ends it), and a span
    A ended is not sent again."""
    a, a_exporter = make_tracer(tmp_path, clock, session_idle_timeout_s=IDLE_S, sweep_interval_s=0.02)
    b, b_exporter = make_tracer(tmp_path, clock, session_idle_timeout_s=IDLE_S, sweep_interval_s=0.02)
    try:
        _step(a, clock, "both")
        clock.advance(0.5)
        _step(b, clock, "both")   # B notes A's span
        for _ in range(2):   # A keeps the session alive past B's idle timeout plus margin
            clock.advance(7.5)
            _step(a, clock, "both")
        clock.advance(5.0)   # past the noted span's due time; A's last step is 5 s old
        time.sleep(0.2)
        assert a.num_live_sessions == 1
        [a_span_id] = {s.parent.span_id for s in _chats(a_exporter)}
        assert a_span_id not in {s.context.span_id for s in _agents(b_exporter)}
        clock.advance(6.0)   # A ends its span
        assert _wait_for(lambda: a.num_live_sessions == 0 and b.num_live_sessions == 0)
        clock.advance(2 * IDLE_S + 5.0)   # B looks again: ended by its writer, nothing to send
        time.sleep(0.2)
        assert a.flush(5.0) and b.flush(5.0)
        [a_agent] = _agents(a_exporter)
        assert a_agent.context.span_id == a_span_id and a_agent.attributes["stepahead.session.num_steps"] == 3
        [b_agent] = _agents(b_exporter)   # its own span only
        assert b_agent.context.span_id != a_span_id and b_agent.attributes["stepahead.session.num_steps"] == 1
    finally:
        a.stop()
        b.stop()
