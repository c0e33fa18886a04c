"""The gap forecaster's estimates: a step leans on its tenant by the evidence (FI117)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from cache.forecast_source import RequestSeen
from cache.gap_forecaster import GapForecaster
from cache.gap_stats import LogGapStats, LogNormalGap, level_spread


def test_a_long_tool_whose_runs_agree_is_forecast_at_their_median() -> None:
    # As QA188 F3 for the predictor: every `batch_job` run took 3 h, among 0.01 s pings.
    # With a fixed 3 pseudo-gaps of the tenant level (about 9 nats away) the step's median
    # was 15 min, and 1.8 h at the depth it runs at; twelve runs that agree outweigh it.
    forecaster = GapForecaster()
    t = 0.0
    for i in range(12):
        session = f"s{i}"
        for _ in range(9):
            forecaster.observe(RequestSeen("t", session, t, tool_calls=("ping",), num_blocks=2))
            t += 0.01
        forecaster.observe(RequestSeen("t", session, t, tool_calls=("batch_job",), num_blocks=2))
        t += 3 * 3600.0
        forecaster.observe(RequestSeen("t", session, t, num_blocks=3))
        t += 100.0
    at_its_depth = forecaster.gap_distribution("t", "tool:batch_job", (4,))
    at_another = forecaster.gap_distribution("t", "tool:batch_job", (0,))   # the step level
    assert at_its_depth.median_s == pytest.approx(10_800.0, rel=0.02)
    assert at_another.median_s == pytest.approx(10_800.0, rel=0.02)
    assert forecaster.gap_distribution("t", "tool:ping", (4,)).median_s == pytest.approx(0.01, rel=0.05)


def test_a_key_seen_once_leans_on_its_parent_as_much_as_its_siblings_agree() -> None:
    rng = np.random.default_rng(1)

    def pull(means: tuple[float, ...], sigma: float) -> float:
        """The parent's share in the estimate of a key seen once at log gap 4."""
        children = []
        for mu in means:
            stats = LogGapStats()
            for gap in rng.lognormal(mean=mu, sigma=sigma, size=50):
                stats.add(float(gap))
            children.append(stats)
        parent_mu = sum(c.sum_log for c in children) / sum(c.num_gaps for c in children)
        spread = level_spread(parent_mu, children, 3.0, 1.5 ** 2)
        once = LogGapStats()
        once.add(math.exp(4.0))
        estimate = once.toward(LogNormalGap(parent_mu, 1.0), spread, 3.0)
        assert estimate.sigma > 0.0
        return (4.0 - estimate.mu) / (4.0 - parent_mu)

    assert 0.3 < pull((1.0, 1.0, 1.0, 1.0), 1.0) < 1.0   # siblings alike: one run is mostly noise
    assert pull((-3.0, 0.0, 3.0, 6.0), 0.2) < 0.05        # siblings far apart: mostly signal
    assert LogGapStats().toward(LogNormalGap(1.0, 2.0), level_spread(0.0, [], 3.0, 2.25), 3.0) == LogNormalGap(1.0, 2.0)
