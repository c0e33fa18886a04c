"""Trust (`recent_top1`, `confident`) is scored on the real guesses only (QA160 finding 1).

A tenant whose sessions all ended after their first answer forecasts END after every
answer. A session that keeps coming back proves that wrong at each turn; before, the
tool steps (named by the reply, always right) and the text answers (scored mid-request)
kept `recent_top1` near 0.8 and every after-answer forecast `confident` for ever.
"""
from __future__ import annotations

from agents_trace.predict.config import PredictorConfig
from agents_trace.predict.predictor import Predictor

TENANT = "t"
MAX_TURNS = 40   # the fixed code turns unconfident after 34 wrong turns here; the old never


def _turn(predictor: Predictor, session: str, t_s: float) -> float:
    """USER -> search -> fetch -> text answer, fed as the gateway feeds it; the time
    the session waits from after its answer."""
    predictor.observe(TENANT, session, "USER", t_s, 3.0)
    predictor.mark_waiting(TENANT, session, t_s + 0.5, ("search",))
    t_s += 2.5
    predictor.observe(TENANT, session, "search", t_s, 2.0)
    predictor.mark_waiting(TENANT, session, t_s + 0.5, ("fetch",))
    t_s += 2.5
    predictor.observe(TENANT, session, "fetch", t_s, 2.0)
    predictor.observe(TENANT, session, "ASSISTANT_TEXT", t_s + 0.5, None)
    predictor.mark_waiting(TENANT, session, t_s + 0.5, ())
    return t_s + 0.5


def _learned_one_answer_tenant(num_sessions: int = 16, **config) -> tuple[Predictor, float]:
    predictor = Predictor(PredictorConfig(background_refits=False, **config))
    t_s = 1000.0
    for i in range(num_sessions):
        t_s = _turn(predictor, f"s{i}", t_s) + 30.0
        predictor.observe(TENANT, f"s{i}", "END", t_s, 30.0)
        predictor.refit_if_due(TENANT)
        t_s += 5.0
    return predictor, t_s


def _top(forecast) -> str:
    return max(forecast.next_step, key=forecast.next_step.get)


def test_a_run_of_wrong_after_answer_forecasts_turns_confident_off() -> None:
    # The tenant's trust on its own: the session's own run of misses (FI63,
    # test_session_trust.py) would turn this one session unconfident at its 3rd turn.
    predictor, t_s = _learned_one_answer_tenant(session_max_misses=0)
    first = None
    for turn in range(1, MAX_TURNS + 1):
        t_s = _turn(predictor, "back", t_s)
        forecast = predictor.forecast(TENANT, "back", t_s)
        assert _top(forecast) == "END" and forecast.p_end > 0.9   # the learned guess, wrong here
        if turn == 1:
            assert forecast.confident   # a fitted, accurate tenant: trusted at first
        if not forecast.confident:
            first = turn
            break
        t_s += 3.0
    assert first is not None, (f"still confident after {MAX_TURNS} wrong after-answer forecasts; "
                               f"recent_top1 {predictor.status(TENANT).recent_top1}")
    assert predictor.status(TENANT).recent_top1 < 0.3


def test_tool_waits_stay_confident_while_the_guesses_are_distrusted() -> None:
    predictor, t_s = _learned_one_answer_tenant()
    for _ in range(MAX_TURNS):
        t_s = _turn(predictor, "back", t_s) + 3.0
    assert not predictor.forecast(TENANT, "back", t_s).confident
    predictor.observe(TENANT, "back", "USER", t_s, 3.0)
    predictor.mark_waiting(TENANT, "back", t_s + 0.5, ("search",))
    forecast = predictor.forecast(TENANT, "back", t_s + 0.5)
    assert _top(forecast) == "search" and forecast.confident


def test_only_steps_after_a_wait_without_named_tools_are_scored() -> None:
    predictor, t_s = _learned_one_answer_tenant()
    accuracy = predictor._tenants[TENANT].accuracy
    scored = accuracy.num_scored
    # A new session's first step, the named tools, the text answer: no guess scored.
    t_s = _turn(predictor, "new", t_s)
    assert accuracy.num_scored == scored
    # Two tools of one reply: the second arrives in the same request, not after a wait.
    predictor.observe(TENANT, "new", "USER", t_s + 1.0, 1.0)          # after the answer: scored
    assert accuracy.num_scored == scored + 1
    predictor.mark_waiting(TENANT, "new", t_s + 1.5, ("search", "fetch"))
    predictor.observe(TENANT, "new", "search", t_s + 3.0, 1.5)
    predictor.observe(TENANT, "new", "fetch", t_s + 3.0, 1.5)
    assert accuracy.num_scored == scored + 1
    # A reply that named no tool and gave no answer (an error): the next step is a guess.
    predictor.mark_waiting(TENANT, "new", t_s + 3.5, ())
    predictor.observe(TENANT, "new", "fetch", t_s + 5.0, 1.5)
    assert accuracy.num_scored == scored + 2
    # END after a tool-calling reply (abandoned) is the abandon odds' business, not a guess.
    predictor.mark_waiting(TENANT, "new", t_s + 5.5, ("search",))
    predictor.observe(TENANT, "new", "END", t_s + 100.0, 94.5)
    assert accuracy.num_scored == scored + 2
