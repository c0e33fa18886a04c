"""Turn odds: P(END) after a session's k-th text answer, learned from how many answers the
tenant's finished sessions gave, shrunk toward the step model's."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from agents_trace.predict.config import PredictorConfig
from agents_trace.predict.predictor import Predictor
from agents_trace.predict.tenant import TenantState
from agents_trace.predict.turns import TurnOdds, answer_outcomes

from .synthetic import agent_sessions

SILENT = ("ASSISTANT_TEXT",)
TURN = ("USER", "search", "read", "ASSISTANT_TEXT")


def test_answer_outcomes_look_through_runs_of_silence() -> None:
    sequence = ["USER", "ASSISTANT_TEXT", "USER", "search", "ASSISTANT_TEXT", "ASSISTANT_TEXT", "END"]
    assert list(answer_outcomes(sequence, SILENT)) == [(1, False), (2, True)]
    assert list(answer_outcomes(["USER", "search", "ASSISTANT_TEXT"], SILENT)) == []  # cut short
    assert list(answer_outcomes(["USER", "search", "END"], SILENT)) == []


def test_turn_odds_by_hand_with_the_cap_pooling_late_answers() -> None:
    odds = TurnOdds(cap=2)
    one = ("USER", "ASSISTANT_TEXT", "END")
    three = ("USER", "ASSISTANT_TEXT", "USER", "ASSISTANT_TEXT", "USER", "ASSISTANT_TEXT", "END")
    for sequence in (one, one, three):
        odds.add(sequence, SILENT)
    assert odds.seen == [3.0, 2.0] and odds.ended == [2.0, 1.0]  # answers 2 and 3 pooled
    assert odds.p_end(1, 0.5, 0.0) == pytest.approx(2 / 3)
    assert odds.p_end(1, 0.5, 3.0) == pytest.approx((2 + 1.5) / (3 + 3))
    assert odds.p_end(7, 0.2, 2.0) == pytest.approx((1 + 0.4) / (2 + 2))
    assert odds.p_end(0, 0.3, 2.0) == 0.3  # before any answer: the model's own
    odds.add(one, SILENT, weight=-1.0)
    fresh = TurnOdds(cap=2)
    for sequence in (one, three):
        fresh.add(sequence, SILENT)
    assert (odds.seen, odds.ended) == (fresh.seen, fresh.ended)
    with pytest.raises(ValueError):
        TurnOdds(cap=0)


def test_after_an_answer_only_end_moves_and_the_rest_keep_their_proportions() -> None:
    tenant = TenantState("a", PredictorConfig(turn_odds_strength=4.0))
    for _ in range(6):
        tenant.turn_odds.add(("USER", "ASSISTANT_TEXT", "END"), SILENT)
    p1 = np.array([0.5, 0.3, 0.2])  # END at index 2
    adjusted = tenant._after_answer_locked(p1, 2, answers=1)
    p_end = (6 + 4 * 0.2) / (6 + 4)
    assert adjusted[2] == pytest.approx(p_end)
    assert adjusted[:2] == pytest.approx(p1[:2] * (1 - p_end) / 0.8)
    assert adjusted.sum() == pytest.approx(1.0)


def live_end_odds(predictor: Predictor, num_turns: int = 3) -> list[float]:
    """P(next step is END) for a new session after each of its text answers."""
    t_s, out = 0.0, []
    for _ in range(num_turns):
        for symbol in TURN:
            t_s += 1.0
            predictor.observe("a", "live", symbol, t_s)
        out.append(predictor.forecast("a", "live", t_s).next_step["END"])
    return out


def test_forecasts_count_the_answers_the_step_model_cannot() -> None:
    """Sessions of one to three turns: the step model says the same P(END) after every
    answer; the turn odds say (ended_k + 10 p_model) / (seen_k + 10) by hand."""
    sessions = agent_sessions(90)
    turns = Counter(s.count("ASSISTANT_TEXT") for s in sessions)
    with Predictor(PredictorConfig(background_refits=False, min_sessions=5, turn_odds_strength=0.0)) as plain:
        plain.fit_sequences("a", sessions)
        model_odds = live_end_odds(plain)
    with Predictor(PredictorConfig(background_refits=False, min_sessions=5)) as counting:
        counting.fit_sequences("a", sessions)
        odds = live_end_odds(counting)
    assert max(model_odds) - min(model_odds) < 0.05
    for k in (1, 2, 3):
        seen = sum(n for count, n in turns.items() if count >= k)
        ended = turns[k]
        assert odds[k - 1] == pytest.approx((ended + 10 * model_odds[k - 1]) / (seen + 10), abs=5e-3)
    assert odds[0] < model_odds[0] < odds[2]


def test_turn_odds_follow_the_kept_sessions_and_survive_a_restart(tmp_path) -> None:
    config = PredictorConfig(background_refits=False, min_sessions=5, max_fit_sessions=10)
    sessions = agent_sessions(30)
    with Predictor(config) as predictor:
        predictor.fit_sequences("a", sessions)
        kept = TurnOdds(config.turn_odds_cap)
        for sequence in sessions[-10:]:
            kept.add([*sequence, "END"], SILENT)
        odds = predictor._tenant("a").turn_odds
        assert (odds.seen, odds.ended) == (kept.seen, kept.ended)
        before = live_end_odds(predictor)
        predictor.save(tmp_path)
    with Predictor.restored(tmp_path, config) as restored:
        odds = restored._tenant("a").turn_odds
        assert (odds.seen, odds.ended) == (kept.seen, kept.ended)
        assert live_end_odds(restored) == pytest.approx(before, rel=1e-9)
