"""A session's END "gap" is the idle time after which it was declared over, not a step's
duration: it must not enter the tools' gap statistics (QA160 finding 2a). Every tool
here takes exactly 2 s and every session ends by the gateway's default 900 s idle."""
from __future__ import annotations

import numpy as np
import pytest

from agents_trace.predict.config import PredictorConfig
from agents_trace.predict.durations import DurationModel
from agents_trace.predict.gap_distributions import DurationPrior
from agents_trace.predict.predictor import Predictor

TENANT = "t"
IDLE_S = 900.0
TOOL_S = 2.0


def _fed_as_the_gateway_feeds(end_gap_s: float | None) -> tuple[Predictor, float]:
    predictor = Predictor(PredictorConfig(background_refits=False))
    t_s = 1000.0
    for i in range(60):
        session, tool = f"s{i}", f"tool_{i % 12}"      # each tool runs 5 times
        predictor.observe(TENANT, session, "USER", t_s, None)
        predictor.mark_waiting(TENANT, session, t_s + 0.1, (tool,))
        t_s += 0.1 + TOOL_S
        predictor.observe(TENANT, session, tool, t_s, TOOL_S)
        predictor.observe(TENANT, session, "ASSISTANT_TEXT", t_s + 0.1, None)
        predictor.mark_waiting(TENANT, session, t_s + 0.1, ())
        t_s += IDLE_S
        predictor.observe(TENANT, session, "END", t_s, end_gap_s)   # symbols.py passes the idle time
    predictor.refit(TENANT)
    return predictor, t_s


def _eta(predictor: Predictor, t_s: float, tool: str) -> dict[float, float]:
    session = f"live-{tool}"
    predictor.observe(TENANT, session, "USER", t_s, None)
    predictor.mark_waiting(TENANT, session, t_s + 0.1, (tool,))
    return dict(predictor.forecast(TENANT, session, t_s + 0.1).eta_quantiles_s)


@pytest.mark.parametrize("tool", ["tool_3", "never_seen"])
def test_end_idle_time_does_not_widen_tool_forecasts(tool: str) -> None:
    predictor, t_s = _fed_as_the_gateway_feeds(IDLE_S)
    eta = _eta(predictor, t_s, tool)
    assert eta[0.5] == pytest.approx(TOOL_S, rel=0.1)
    assert eta[0.9] < 5.0


def test_end_gap_is_learned_nowhere() -> None:
    predictor, _ = _fed_as_the_gateway_feeds(IDLE_S)
    durations = predictor._tenants[TENANT].durations
    assert "END" not in durations.by_symbol
    assert durations.all_steps.num_gaps == 60     # the 60 tool runs, nothing else


def test_a_saved_end_row_is_taken_back_out_of_all_steps() -> None:
    """State saved by the old code holds an END row, also summed into all steps."""
    clean = DurationModel(DurationPrior())
    for _ in range(5):
        clean.observe("search", TOOL_S)
    names, stats = clean.to_arrays()
    x = np.log(IDLE_S)
    end = np.array([3.0, 3.0 * x, 3.0 * x * x])   # 3 gaps of 900 s
    stats = np.vstack([stats, end])
    stats[0] += end
    restored = DurationModel.from_arrays(DurationPrior(), names + ["END"], stats)
    assert "END" not in restored.by_symbol
    assert restored.all_steps.num_gaps == 5
    assert restored.tenant_level().quantile_s(0.5) == pytest.approx(
        clean.tenant_level().quantile_s(0.5), rel=1e-9)
