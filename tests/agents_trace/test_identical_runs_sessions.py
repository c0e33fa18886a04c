"""Two runs of one program without `x-session-id` that get the same first reply (temperature
0, a seed, the same eval twice) have identical prefixes: each run's next turn must still go on
in its own run's session (QA227 F1). Among candidates that match equally well, a session
whose matched step no later step went on from yet wins, then one of the request's agent."""
from __future__ import annotations

import pytest

from agents_trace.records import StepResult

from tests.agents_trace.helpers import ManualClock, make_tracer

FIRST = [{"role": "system", "content": "You are a friendly chatbot."},
         {"role": "user", "content": "Hi! Tell me a fact about owls."}]
REPLY = "Owls can turn their heads about 270 degrees."


@pytest.fixture
def clock():
    return ManualClock()


def _headers(agent):
    return {"x-agent-name": agent} if agent else {}


def _second_turn(user_text):
    return FIRST + [{"role": "assistant", "content": REPLY}, {"role": "user", "content": user_text}]


def _begin(tracer, messages, agent=None):
    return tracer.begin("acme", _headers(agent), {"model": "tiny", "messages": messages})


def _answer(tracer, ctx, text=REPLY):
    tracer.end(ctx, StepResult(finish_reason="stop", output_text=text, num_output_tokens=9))


def _two_identical_first_turns(tracer, clock, agents=(None, None)):
    """Run A's then run B's first turn, each answered with the same reply."""
    a0 = _begin(tracer, FIRST, agents[0])
    clock.advance(0.5)
    _answer(tracer, a0)
    clock.advance(0.1)
    b0 = _begin(tracer, FIRST, agents[1])
    clock.advance(0.5)
    _answer(tracer, b0)
    clock.advance(1.0)
    assert a0.session != b0.session
    return a0, b0


@pytest.mark.parametrize("agents", [(None, None), ("run-A", "run-B")])
def test_overlapping_second_turns_of_identical_runs_go_one_to_each_session(tmp_path, clock, agents):
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        a0, b0 = _two_identical_first_turns(tracer, clock, agents)
        a1 = _begin(tracer, _second_turn("And about cats?"), agents[0])
        clock.advance(0.2)
        b1 = _begin(tracer, _second_turn("And about dogs?"), agents[1])   # A's turn still in flight
        clock.advance(0.5)
        _answer(tracer, a1, "Cats sleep a lot.")
        _answer(tracer, b1, "Dogs can smell fear.")
        assert {a1.session, b1.session} == {a0.session, b0.session}
        assert (a1.index, b1.index) == (1, 1)
        assert a1.session_source == b1.session_source == "prefix"
        if agents[0] is not None:   # named runs: each in its own run's session
            assert (a1.session, b1.session) == (a0.session, b0.session)
    finally:
        tracer.stop()


def test_sequential_second_turns_of_named_identical_runs_stay_in_their_own_sessions(tmp_path, clock):
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        a0, b0 = _two_identical_first_turns(tracer, clock, ("run-A", "run-B"))
        a1 = _begin(tracer, _second_turn("And about cats?"), "run-A")
        clock.advance(0.5)
        _answer(tracer, a1, "Cats sleep a lot.")
        clock.advance(0.3)
        b1 = _begin(tracer, _second_turn("And about dogs?"), "run-B")
        clock.advance(0.5)
        _answer(tracer, b1, "Dogs can smell fear.")
        assert (a1.session, a1.index) == (a0.session, 1)
        assert (b1.session, b1.index) == (b0.session, 1)
        assert a1.gap_s == pytest.approx(1.6) and b1.gap_s == pytest.approx(1.8)   # from its own reply
    finally:
        tracer.stop()


def test_a_refused_second_turns_retry_stays_in_its_session_beside_a_twin(tmp_path, clock):
    """A turn that failed having generated nothing went on from nothing: its retry is
    still the first continuation of its session, not of the twin's."""
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        a0, b0 = _two_identical_first_turns(tracer, clock, ("run-A", "run-B"))
        refused = _begin(tracer, _second_turn("And about cats?"), "run-A")
        tracer.end(refused, StepResult(error="rate_limit_exceeded"))
        clock.advance(1.0)
        retry = _begin(tracer, _second_turn("And about cats?"), "run-A")
        clock.advance(0.5)
        _answer(tracer, retry, "Cats sleep a lot.")
        assert (refused.session, retry.session) == (a0.session, a0.session)
        assert retry.index == 2
        b1 = _begin(tracer, _second_turn("And about dogs?"), "run-B")
        assert (b1.session, b1.index) == (b0.session, 1)
    finally:
        tracer.stop()
