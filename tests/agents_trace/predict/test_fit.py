"""Fitting a StepModel: distributions, learned structure, selection choices."""
from __future__ import annotations

import numpy as np
import pytest

from agents_trace.predict.fit import FitConfig, fit_step_model
from agents_trace.predict.step_model import TOOL_CLASS

from .synthetic import agent_sessions, batched_sessions


@pytest.fixture(scope="module")
def model():
    return fit_step_model(agent_sessions(60), FitConfig())


def test_fit_step_model_predictions_are_distributions(model) -> None:
    state = model.start_state()
    for symbol in ["USER", "search", "read", "ASSISTANT_TEXT", "never_seen_tool"]:
        p = model.static_next(state)
        assert p.sum() == pytest.approx(1.0) and (p > 0).all()
        state = model.advance(state, model.encode(symbol))


def test_fit_step_model_learns_transitions(model) -> None:
    state = model.state_after(["USER", "search"])
    p = model.static_next(state)
    assert model.vocab.symbols[int(np.argmax(p))] == "read"
    assert model.vocab.symbols[int(np.argmax(model.static_next(model.start_state())))] == "USER"


def test_fit_step_model_reports_validation(model) -> None:
    report = model.report
    assert report.num_sessions == 60
    assert report.val_top1 is not None and report.val_top1 > 0.5
    assert report.num_val_symbols > 0
    assert sum(report.weights) == pytest.approx(1.0)


def test_fit_step_model_tiny_data_has_no_validation() -> None:
    model = fit_step_model(agent_sessions(3), FitConfig())
    assert model.report.val_top1 is None
    assert model.static_next(model.start_state()).sum() == pytest.approx(1.0)


def test_fit_step_model_switches_recency_on_for_batched_tenant() -> None:
    model = fit_step_model(batched_sessions(8, 10), FitConfig())
    assert model.recency is not None


def test_fit_step_model_abstract_sees_only_classes() -> None:
    model = fit_step_model(agent_sessions(30), FitConfig(), abstract=True)
    assert set(model.vocab.symbols) == {"USER", "ASSISTANT_TEXT", "END", TOOL_CLASS,
                                        "<oov>"}
    assert model.encode("search") == model.vocab.index[TOOL_CLASS]
