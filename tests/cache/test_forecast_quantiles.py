"""`Forecast.eta_quantile_at` is `eta_s`'s inverse over the stored quantiles: known answers
between them, from 0 at 0 s, and None where nothing is known."""
from __future__ import annotations

import pytest

from cache.forecast import Forecast

QUANTILES = ((0.1, 1.0), (0.5, 5.0), (0.9, 25.0))


def test_the_quantile_reached_by_a_time_inverts_eta_s():
    forecast = Forecast("t", "s", 0.0, eta_quantiles_s=QUANTILES)
    assert forecast.eta_quantile_at(0.0) == 0.0
    assert forecast.eta_quantile_at(0.5) == pytest.approx(0.05)
    assert forecast.eta_quantile_at(3.0) == pytest.approx(0.3)
    for q, s in QUANTILES[:-1]:
        assert forecast.eta_quantile_at(s) == pytest.approx(q)
        assert forecast.eta_s(forecast.eta_quantile_at(s)) == pytest.approx(s)
    assert forecast.eta_quantile_at(15.0) == pytest.approx(0.7)


def test_no_quantile_past_the_last_or_without_any():
    assert Forecast("t", "s", 0.0, eta_quantiles_s=QUANTILES).eta_quantile_at(25.0) is None
    assert Forecast("t", "s", 0.0).eta_quantile_at(1.0) is None
