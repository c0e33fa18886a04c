"""A session whose own guesses keep missing stops being confident (QA160 finding 1, FI63).

The tenant below learned sessions that end after their answer, so it forecasts END after
every answer and its tenant-wide trust stays high. One live session whose user comes
back after each answer proves that wrong at every turn: after `session_max_misses` misses
of its own its after-answer forecasts are no longer confident, until one of its guesses
hits; the tenant's other sessions and that session's tool waits keep their confidence.
Before, that session stayed confident for 30-odd wrong turns (until the tenant's trust
itself fell).
"""
from __future__ import annotations

import pytest

from agents_trace.predict.config import PredictorConfig
from agents_trace.predict.predictor import Predictor

from tests.agents_trace.predict.test_trust_real_guesses import TENANT, _learned_one_answer_tenant, _top, _turn


def _fitted(**config) -> tuple[Predictor, float]:
    """A fitted tenant whose 16 learned sessions each ended after their one answer."""
    predictor, t_s = _learned_one_answer_tenant(**config)
    assert predictor.model_of(TENANT) is not None
    return predictor, t_s


def _other_session_confident(predictor: Predictor, name: str, t_s: float) -> float:
    """A session of the tenant's usual kind: confident after its answer, then ends there."""
    t_s = _turn(predictor, name, t_s)
    forecast = predictor.forecast(TENANT, name, t_s + 1.0)
    assert _top(forecast) == "END" and forecast.confident, name
    predictor.observe(TENANT, name, "END", t_s + 30.0, 30.0)
    return t_s + 1.0


def test_a_session_whose_after_answer_guesses_miss_turns_unconfident_until_a_hit() -> None:
    predictor, t_s = _fitted(session_max_misses=2)
    seen = []
    for turn in range(1, 5):   # each turn but the first proves the last END guess wrong
        t_s = _turn(predictor, "back", t_s)
        forecast = predictor.forecast(TENANT, "back", t_s + 1.0)
        assert _top(forecast) == "END" and forecast.p_end > 0.9   # the learned guess
        seen.append(forecast.confident)
        t_s = _other_session_confident(predictor, f"other{turn}", t_s + 2.0) + 2.0
    # misses before each forecast: 0, 1, 2, 3
    assert seen == [True, True, False, False]
    assert predictor.status(TENANT).recent_top1 > 0.8   # the tenant's trust did not move it

    # One of its guesses hits: a reply after the user's turn named no tool (an error),
    # and the step model's guess, `search`, is what came.
    predictor.observe(TENANT, "back", "USER", t_s, 3.0)
    predictor.mark_waiting(TENANT, "back", t_s + 0.5, ())
    assert _top(predictor.forecast(TENANT, "back", t_s + 1.0)) == "search"
    t_s += 2.5
    predictor.observe(TENANT, "back", "search", t_s, 2.0)
    predictor.mark_waiting(TENANT, "back", t_s + 0.5, ("fetch",))
    t_s += 2.5
    predictor.observe(TENANT, "back", "fetch", t_s, 2.0)
    predictor.observe(TENANT, "back", "ASSISTANT_TEXT", t_s + 0.5, None)
    predictor.mark_waiting(TENANT, "back", t_s + 0.5, ())
    forecast = predictor.forecast(TENANT, "back", t_s + 1.0)
    assert _top(forecast) == "END" and forecast.confident

    # ... and the next miss alone does not take it away again (2 in a row do).
    t_s = _turn(predictor, "back", t_s + 3.0)
    assert predictor.forecast(TENANT, "back", t_s + 1.0).confident
    t_s = _turn(predictor, "back", t_s + 3.0)
    assert not predictor.forecast(TENANT, "back", t_s + 1.0).confident
    _other_session_confident(predictor, "other-last", t_s + 2.0)


def test_tool_waits_of_a_distrusted_session_keep_todays_rule() -> None:
    predictor, t_s = _fitted(session_max_misses=2)
    for _ in range(3):
        t_s = _turn(predictor, "back", t_s) + 3.0
    assert not predictor.forecast(TENANT, "back", t_s).confident
    predictor.observe(TENANT, "back", "USER", t_s, 3.0)   # its third miss in a row
    predictor.mark_waiting(TENANT, "back", t_s + 0.5, ("search",))
    forecast = predictor.forecast(TENANT, "back", t_s + 1.0)
    assert _top(forecast) == "search" and forecast.confident


def test_session_max_misses_0_keeps_the_old_behaviour() -> None:
    predictor, t_s = _fitted(session_max_misses=0)
    for turn in range(1, 7):
        t_s = _turn(predictor, "back", t_s)
        forecast = predictor.forecast(TENANT, "back", t_s + 1.0)
        assert _top(forecast) == "END" and forecast.confident, turn
        t_s += 3.0


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2", None])
def test_session_max_misses_must_be_a_whole_number_not_negative(bad) -> None:
    with pytest.raises(ValueError, match="session_max_misses"):
        PredictorConfig(session_max_misses=bad)


def test_session_max_misses_defaults_to_3_and_accepts_0_and_larger() -> None:
    assert PredictorConfig().session_max_misses == 3
    assert PredictorConfig(session_max_misses=0).session_max_misses == 0
    assert PredictorConfig(session_max_misses=5).session_max_misses == 5
