"""No number that is not finite gets into a gap forecaster's memory (QA126 #1): a
request whose arrival time is NaN or infinite is not learned, so it neither stops the
expiry of every later wait (a NaN deadline at the top of the heap) nor makes the sums,
and every forecast of the tenant, NaN."""
from __future__ import annotations

import math

import pytest

from cache.forecast_source import RequestSeen
from cache.gap_forecaster import GapForecaster, GapForecasterConfig
from cache.gap_stats import LogGapStats


def _all_finite(forecaster: GapForecaster) -> bool:
    learned = forecaster.learned()
    numbers = [x for s in learned.gaps.values() for x in (s.num_gaps, s.sum_log, s.sum_log_sq)]
    numbers += [x for c in learned.returns.values() for x in (c.num_returned, c.num_ended)]
    numbers += list(learned.p_estimates.values())
    return all(math.isfinite(x) for x in numbers)


@pytest.mark.parametrize("bad_t", [math.nan, math.inf])
def test_a_request_at_a_time_that_is_not_finite_stops_no_expiry(bad_t) -> None:
    forecaster = GapForecaster(GapForecasterConfig(recount_every=4))
    forecaster.observe(RequestSeen("other", "odd", bad_t, tool_calls=("search",), num_blocks=2))
    forecaster.observe(RequestSeen("t", "s", 0.0, tool_calls=("search",), num_blocks=2))
    assert forecaster.forecast("t", "s", 1e9) is not None   # expires whatever is due by 1e9
    assert forecaster.num_resolved("t") == 1.0   # the wait was given up as an end
    assert _all_finite(forecaster)


def _fed(bad_t: float | None) -> GapForecaster:
    forecaster = GapForecaster(GapForecasterConfig(recount_every=2))
    for i in range(30):
        forecaster.observe(RequestSeen("t", f"s{i}", 10.0 * i, tool_calls=("search",), num_blocks=2))
        forecaster.observe(RequestSeen("t", f"s{i}", 10.0 * i + 2.0, num_blocks=2))
    forecaster.observe(RequestSeen("t", "x", 400.0, tool_calls=("search",), num_blocks=2))
    if bad_t is not None:
        forecaster.observe(RequestSeen("t", "x", bad_t, num_blocks=2))
    forecaster.observe(RequestSeen("t", "y", 500.0, tool_calls=("search",), num_blocks=2))
    return forecaster


@pytest.mark.parametrize("bad_t", [math.nan, math.inf])
def test_a_return_at_a_time_that_is_not_finite_is_not_learned(bad_t) -> None:
    """Was: NaN learned as a gap of 0 s (max(0.0, nan) is 0.0); infinity made the sums
    infinite and every estimate of the tenant NaN."""
    forecaster, clean = _fed(bad_t), _fed(None)
    assert _all_finite(forecaster)
    assert forecaster.learned() == clean.learned()
    forecast = forecaster.forecast("t", "y", 500.01)
    assert forecast.confident and forecast == clean.forecast("t", "y", 500.01)
    assert 1.0 < forecast.eta_s(0.5) < 4.0


def test_a_gap_that_is_not_finite_is_not_added() -> None:
    stats = LogGapStats()
    stats.add(2.0)
    for gap in (math.nan, math.inf, -math.inf):
        stats.add(gap)
    assert stats == LogGapStats(1.0, math.log(2.0), math.log(2.0) ** 2)
