"""check_forecast: the most likely next step against what came, and the median ETA told
from the previous response's end, as the step's gap is."""
from __future__ import annotations

import pytest

from agents_trace.records import After, SessionId, Step, ToolCall
from agents_trace.symbols import check_forecast
from cache.forecast import Forecast


def _step(prev_ended_s, after=After("user")) -> Step:
    return Step("t", SessionId("s"), 1, "header", "chat", "m", None, 20.0, 21.0, after, 8.0, prev_ended_s,
                3, False, 10, 0, 2, 0.1, "w0", "stop", ())


def _forecast(made_at_s: float, eta_s: float) -> Forecast:
    return Forecast("t", "s", made_at_s, next_step={"USER": 0.8, "END": 0.2}, p_end=0.2,
                    eta_quantiles_s=((0.1, eta_s / 2), (0.5, eta_s), (0.9, eta_s * 2)), confident=True)


def test_the_eta_counts_from_the_previous_responses_end():
    # a gap forecaster's forecast counts from the previous request's arrival (10 s); that
    # response ended at 12 s: by then 8 % of its returns (2 s of the first 2.5 s, its 10 %)
    # are ruled out, so its median is the 54 % quantile (5.5 s), 3.5 s after the end
    check = check_forecast(_forecast(10.0, 5.0), _step(prev_ended_s=12.0))
    assert check.eta_p50_s == pytest.approx(3.5)
    assert (check.predicted, check.p_predicted, check.actual, check.is_hit) == ("USER", 0.8, "USER", True)
    assert check.is_confident and check.p_end == 0.2
    # the predictor's is made a little after the end (the writer's clock)
    assert check_forecast(_forecast(12.02, 5.0), _step(12.0)).eta_p50_s == pytest.approx(5.02)
    # an unknown end leaves the forecast's own ETA
    assert check_forecast(_forecast(10.0, 5.0), _step(None)).eta_p50_s == 5.0
    assert check_forecast(Forecast("t", "s", 10.0, next_step={"USER": 1.0}), _step(12.0)).eta_p50_s is None


def test_a_tool_step_is_checked_against_the_first_tool_it_carries():
    after = After("tools", (ToolCall("c1", "search"), ToolCall("c2", "read")))
    check = check_forecast(Forecast("t", "s", 0.0, next_step={"read": 0.6, "search": 0.4}), _step(1.0, after))
    assert (check.predicted, check.actual, check.is_hit) == ("read", "search", False)


def test_a_median_before_the_previous_end_is_told_as_the_median_of_the_rest():
    # QA191 N4: a 1 s median from 10 s, the response ending at 12 s, read 0.0 s. By 12 s
    # the forecast's returns up to its 90 % (2 s) are ruled out: the median of the rest is
    # its 95 % quantile; quantiles ending before the end tell no ETA
    forecast = Forecast("t", "s", 10.0, next_step={"USER": 1.0},
                        eta_quantiles_s=((0.1, 0.5), (0.5, 1.0), (0.9, 2.0), (0.99, 4.0)))
    check = check_forecast(forecast, _step(12.0))
    assert check.eta_p50_s == pytest.approx(2.0 + 2.0 * (0.95 - 0.9) / (0.99 - 0.9) - 2.0)
    assert check.eta_p50_s > 0.0
    assert check_forecast(_forecast(10.0, 1.0), _step(12.0)).eta_p50_s is None
    for end_s in (10.3, 10.7, 11.0, 11.5, 12.5):
        assert check_forecast(forecast, _step(end_s)).eta_p50_s > 0.0
