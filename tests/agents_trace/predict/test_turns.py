"""Turn odds: P(END) after a session's k-th text answer, learned from how many answers the
tenant's finished sessions gave, shrunk toward the step model's."""
from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest

from agents_trace.predict.config import PredictorConfig
from agents_trace.predict.persist import tenant_stem
from agents_trace.predict.predictor import Predictor
from agents_trace.predict.tenant import TenantState
from agents_trace.predict.turns import TurnCalibration, answer_outcomes, calibrate

from .synthetic import agent_sessions

SILENT = ("ASSISTANT_TEXT",)
TURN = ("USER", "search", "read", "ASSISTANT_TEXT")


def test_answer_outcomes_score_every_silent_step_with_its_answers_count() -> None:
    sequence = ["USER", "ASSISTANT_TEXT", "USER", "search", "ASSISTANT_TEXT", "ASSISTANT_TEXT", "END"]
    assert list(answer_outcomes(sequence, SILENT)) == [(1, 1, False), (2, 4, False), (2, 5, True)]
    assert list(answer_outcomes(["USER", "search", "ASSISTANT_TEXT"], SILENT)) == []  # cut short
    assert list(answer_outcomes(["USER", "search", "END"], SILENT)) == []


def test_calibration_adds_each_answers_offset_to_the_log_odds() -> None:
    turns = TurnCalibration((1.0, -0.5))
    assert turns.p_end(1, 0.5) == pytest.approx(1 / (1 + math.exp(-1.0)))
    assert turns.p_end(7, 0.2) == pytest.approx(1 / (1 + math.exp(-(math.log(0.25) - 0.5))))  # pooled
    assert turns.p_end(0, 0.3) == 0.3  # before any answer: the model's own
    assert TurnCalibration().p_end(3, 0.3) == 0.3


def test_after_an_answer_only_end_moves_and_the_rest_keep_their_proportions() -> None:
    tenant = TenantState("a", PredictorConfig())
    tenant.turns = TurnCalibration((math.log(3.0),))  # odds of END x 3
    p1 = np.array([0.5, 0.3, 0.2])  # END at index 2
    adjusted = tenant._after_answer_locked(p1, 2, answers=1)
    p_end = 0.75 / (1 + 0.75)  # odds 0.25 x 3
    assert adjusted[2] == pytest.approx(p_end)
    assert adjusted[:2] == pytest.approx(p1[:2] * (1 - p_end) / 0.8)
    assert adjusted.sum() == pytest.approx(1.0)


def test_calibrate_validates_and_shrinks_to_the_model() -> None:
    with Predictor(PredictorConfig(background_refits=False, min_sessions=5, turn_odds_cap=0)) as predictor:
        model = predictor.fit_sequences("a", agent_sessions(40))
    sequences = [[*s, "END"] for s in agent_sessions(40)]
    with pytest.raises(ValueError):
        calibrate(model, sequences, SILENT, cap=0, strength=1.0)
    assert calibrate(model, [], SILENT, cap=3, strength=10.0).offsets == (0.0, 0.0, 0.0)
    loose = calibrate(model, sequences, SILENT, cap=3, strength=1.0).offsets
    tight = calibrate(model, sequences, SILENT, cap=3, strength=1e6).offsets
    assert max(map(abs, tight)) < 1e-3 < max(map(abs, loose))


def live_end_odds(predictor: Predictor, num_turns: int = 3) -> list[float]:
    """P(next step is END) for a new session after each of its text answers."""
    t_s, out = 0.0, []
    for _ in range(num_turns):
        for symbol in TURN:
            t_s += 1.0
            predictor.observe("a", "live", symbol, t_s)
        out.append(predictor.forecast("a", "live", t_s).next_step["END"])
    return out


def logit(p: float) -> float:
    return math.log(p / (1 - p))


def test_forecasts_count_the_answers_the_step_model_cannot() -> None:
    """Sessions of one to three turns: the step model says (nearly) the same P(END) after
    every answer; corrected, the odds follow the session lengths. The offsets by hand:
    the model's P(END) after every answer of the training sessions (each prefix filtered
    afresh), against how often END came next."""
    sessions = agent_sessions(90)
    with Predictor(PredictorConfig(background_refits=False, min_sessions=5, turn_odds_cap=0)) as plain:
        model = plain.fit_sequences("a", sessions)
        model_odds = live_end_odds(plain)
    with Predictor(PredictorConfig(background_refits=False, min_sessions=5)) as counting:
        counting.fit_sequences("a", sessions)
        odds = live_end_odds(counting)
    p_model: dict[int, list[float]] = {1: [], 2: [], 3: []}
    for steps in sessions:
        for i in [i for i, symbol in enumerate(steps) if symbol == "ASSISTANT_TEXT"]:
            p = model.static_next(model.state_after(steps[:i + 1]))
            p_model[steps[:i + 1].count("ASSISTANT_TEXT")].append(p[model.vocab.end_id] / p.sum())
    turns = Counter(s.count("ASSISTANT_TEXT") for s in sessions)
    assert max(model_odds) - min(model_odds) < 0.05
    for k in (1, 2, 3):
        mean = sum(p_model[k]) / len(p_model[k])
        offset = logit((turns[k] + 10 * mean) / (len(p_model[k]) + 10)) - logit(mean)
        assert odds[k - 1] == pytest.approx(1 / (1 + math.exp(-(logit(model_odds[k - 1]) + offset))), abs=2e-3)
    assert odds[0] < model_odds[0] - 0.1 and odds[2] > model_odds[2] + 0.3


def test_the_calibration_comes_with_each_refit_and_survives_a_restart(tmp_path) -> None:
    config = PredictorConfig(background_refits=False, min_sessions=5, max_fit_sessions=10)
    sessions = agent_sessions(30)
    with Predictor(config) as predictor:
        model = predictor.fit_sequences("a", sessions)
        kept = [tuple([*s, "END"]) for s in sessions[-10:]]  # what the refit saw
        expected = calibrate(model, kept, SILENT, config.turn_odds_cap, config.turn_odds_strength)
        assert predictor._tenant("a").turns == expected and any(expected.offsets)
        before = live_end_odds(predictor)
        predictor.save(tmp_path)
    with Predictor.restored(tmp_path, config) as restored:
        assert restored._tenant("a").turns == expected
        assert live_end_odds(restored) == pytest.approx(before, rel=1e-9)


def test_a_tenant_saved_before_turns_were_calibrated_is_calibrated_on_load(tmp_path) -> None:
    config = PredictorConfig(background_refits=False, min_sessions=5)
    with Predictor(config) as predictor:
        model = predictor.fit_sequences("a", agent_sessions(30))
        predictor.save(tmp_path)
    path = tmp_path / f"{tenant_stem('a')}.json"
    meta = json.loads(path.read_text())
    del meta["turn_offsets"]
    path.write_text(json.dumps(meta))
    finished = [tuple([*s, "END"]) for s in agent_sessions(30)]
    with Predictor.restored(tmp_path, config) as restored:
        turns = restored._tenant("a").turns
        assert turns == calibrate(model, finished, SILENT, config.turn_odds_cap, config.turn_odds_strength)
        assert any(turns.offsets)
