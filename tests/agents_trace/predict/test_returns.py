"""Return forecasts: single-route known answers, waiting, silent look-through."""
from __future__ import annotations

import math

import numpy as np
import pytest

from agents_trace.predict.durations import DurationModel
from agents_trace.predict.gap_distributions import DurationPrior
from agents_trace.predict.returns import forecast_returns, return_mixture

HORIZONS = np.array([0.5, 1.0, 2.0, 5.0, 30.0])
QUANTILES = np.array([0.1, 0.5, 0.9])
SYMBOLS = ("ASSISTANT_TEXT", "END", "USER", "ls")
AT, END, USER, LS = range(4)


def table_with(mu_by_symbol: dict[str, tuple[float, float]]):
    """A duration table whose listed symbols follow LogNormal(mu, sigma) exactly."""
    model = DurationModel(DurationPrior(median_s=1.0, sigma=1.0, strength=1e-9))
    rng = np.random.default_rng(0)
    for symbol, (mu, sigma) in mu_by_symbol.items():
        z = rng.standard_normal(4000)
        z = (z - z.mean()) / z.std()
        for gap in np.exp(mu + sigma * z):
            model.observe(symbol, float(gap))
    return model.table(SYMBOLS)


def run(p1, p2, table, elapsed_s=0.0, silent=AT):
    mix = return_mixture(np.asarray(p1, float), None if p2 is None else np.asarray(p2, float),
                         END, silent, table, HORIZONS, QUANTILES)
    return forecast_returns(np.asarray(p1, float), None if p2 is None else np.asarray(p2, float),
                            END, silent, mix, elapsed_s, HORIZONS, QUANTILES)


def phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def test_forecast_returns_single_route_known_answer() -> None:
    mu, sigma = 0.7, 0.6
    table = table_with({"ls": (mu, sigma)})
    out = run([0.0, 0.0, 0.0, 1.0], None, table)
    assert out.p_end == pytest.approx(0.0, abs=1e-12)
    for h, p in out.p_return_within:
        assert p == pytest.approx(phi((math.log(h) - mu) / sigma), abs=2e-3)
    for q, eta in out.eta_quantiles_s:
        z = {0.1: -1.2815515655446004, 0.5: 0.0, 0.9: 1.2815515655446004}[q]
        assert eta == pytest.approx(math.exp(mu + sigma * z), rel=0.02)


def test_forecast_returns_end_mass_is_p_end() -> None:
    table = table_with({"ls": (0.0, 0.5)})
    out = run([0.0, 0.25, 0.0, 0.75], None, table)
    assert out.p_end == pytest.approx(0.25)
    assert out.p_return_within[-1][1] <= 0.75 + 1e-12
    assert out.p_return_within[-1][1] == pytest.approx(0.75, abs=1e-3)


def test_forecast_returns_waiting_raises_p_end() -> None:
    table = table_with({"ls": (0.0, 0.5)})  # median 1 s
    fresh = run([0.0, 0.5, 0.0, 0.5], None, table, elapsed_s=0.0)
    waited = run([0.0, 0.5, 0.0, 0.5], None, table, elapsed_s=3.0)
    # Exact: P(no return | waited e) = 0.5 / (0.5 + 0.5 * S(e)).
    survive = 1.0 - phi(math.log(3.0) / 0.5)
    assert waited.p_end == pytest.approx(0.5 / (0.5 + 0.5 * survive), rel=0.02)
    assert waited.p_end > fresh.p_end
    assert waited.next_step[END] > fresh.next_step[END]
    assert waited.next_step.sum() == pytest.approx(1.0)


def test_forecast_returns_looks_through_silent_step() -> None:
    table = table_with({"USER": (3.0, 0.5), "ls": (-1.0, 0.5)})
    # Next is a text answer for sure; after it the user speaks with prob 0.6.
    out = run([1.0, 0.0, 0.0, 0.0], [0.0, 0.4, 0.6, 0.0], table)
    assert out.p_end == pytest.approx(0.4)
    median = dict(out.eta_quantiles_s)[0.5]
    assert median == pytest.approx(math.exp(3.0), rel=0.03)


def test_forecast_returns_invariants() -> None:
    table = table_with({"USER": (2.0, 1.0), "ls": (0.0, 0.3)})
    for elapsed in (0.0, 0.5, 4.0, 100.0):
        out = run([0.2, 0.1, 0.3, 0.4], [0.0, 0.5, 0.5, 0.0], table, elapsed_s=elapsed)
        probs = [p for _, p in out.p_return_within]
        assert all(0.0 <= p <= 1.0 - out.p_end + 1e-12 for p in probs)
        assert probs == sorted(probs)
        etas = [s for _, s in out.eta_quantiles_s]
        assert etas == sorted(etas) and all(s >= 0.0 for s in etas)
        assert out.next_step.sum() == pytest.approx(1.0)
