"""Durations: log-normal known answers and the hierarchical fallback."""
from __future__ import annotations

import math

import numpy as np
import pytest

from agents_trace.predict.durations import DurationModel
from agents_trace.predict.gap_distributions import DurationPrior, GapStats, LogNormal

Z90 = 1.2815515655446004  # standard normal 0.9 quantile


def test_lognormal_quantiles_known_answer() -> None:
    dist = LogNormal(mu=1.0, sigma=0.5)
    assert dist.quantile_s(0.5) == pytest.approx(math.e, rel=1e-12)
    assert dist.quantile_s(0.9) == pytest.approx(math.exp(1.0 + 0.5 * Z90), rel=1e-9)
    assert dist.quantile_s(0.1) == pytest.approx(math.exp(1.0 - 0.5 * Z90), rel=1e-9)
    assert dist.cdf(math.e) == pytest.approx(0.5)
    assert dist.cdf(0.0) == 0.0


def test_duration_model_learns_known_lognormal() -> None:
    rng = np.random.default_rng(0)
    model = DurationModel(DurationPrior(median_s=30.0, sigma=2.0, strength=3.0))
    for gap in rng.lognormal(mean=0.5, sigma=0.8, size=20000):
        model.observe("grep", float(gap))
    dist = model.distribution("grep")
    assert dist.mu == pytest.approx(0.5, abs=0.02)
    assert dist.sigma == pytest.approx(0.8, abs=0.02)
    assert dist.quantile_s(0.9) == pytest.approx(math.exp(0.5 + 0.8 * Z90), rel=0.03)


def test_gap_stats_without_prior_is_the_mle() -> None:
    stats = GapStats()
    for gap in (1.0, math.e, math.e ** 2):
        stats.add(gap)
    dist = stats.shrunk(LogNormal(100.0, 1.0), strength=0.0)
    assert dist.mu == pytest.approx(1.0)
    assert dist.sigma == pytest.approx(math.sqrt(2.0 / 3.0))


def test_duration_model_falls_back_tool_then_tenant_then_prior() -> None:
    prior = DurationPrior(median_s=2.0, sigma=1.0, strength=3.0)
    model = DurationModel(prior)
    # Nothing seen: the global prior.
    assert model.distribution("ls").mu == pytest.approx(math.log(2.0))
    for _ in range(50):
        model.observe("cat", 20.0)
    # An unseen tool uses the tenant level, which has moved toward the tenant's gaps.
    tenant_mu = model.distribution("never_seen").mu
    assert math.log(2.0) < tenant_mu <= math.log(20.0)
    # A tool seen once leans on the tenant level rather than on its single gap.
    model.observe("ls", 0.1)
    ls_mu = model.distribution("ls").mu
    assert math.log(0.1) < ls_mu < tenant_mu


def test_duration_model_ignores_invalid_gaps() -> None:
    model = DurationModel(DurationPrior())
    model.observe("ls", float("nan"))
    model.observe("ls", -1.0)
    assert model.all_steps.num_gaps == 0


def test_duration_model_arrays_round_trip() -> None:
    model = DurationModel(DurationPrior())
    model.observe("ls", 1.5)
    model.observe("cd", 0.2)
    names, stats = model.to_arrays()
    again = DurationModel.from_arrays(DurationPrior(), names, stats)
    for symbol in ("ls", "cd", "other"):
        assert again.distribution(symbol) == model.distribution(symbol)


def test_duration_table_groups_symbols_without_gaps() -> None:
    model = DurationModel(DurationPrior())
    model.observe("ls", 1.5)
    table = model.table(("USER", "ls", "cd"))
    assert table.group_of.tolist() == [0, 1, 0]
    np.testing.assert_allclose(table.membership.sum(axis=1), 1.0)
    assert (np.diff(table.cdf_by_grid, axis=0) >= 0).all()


def test_a_step_whose_runs_agree_follows_them_however_far_the_tenant_level() -> None:
    # QA188 F3: every run of `batch_job` took 3 h, every `ping` 0 s. The tenant level
    # mixes them (about 8 nats from either); a fixed 3 pseudo-gaps of it gave batch_job a
    # p50 of 35 min and p10 of 5 s. Twelve runs that agree outweigh it.
    model = DurationModel(DurationPrior())
    for _ in range(12):
        model.observe("batch_job", 3 * 3600.0)
        model.observe("ping", 0.0)
    batch = model.distribution("batch_job")
    assert batch.quantile_s(0.5) == pytest.approx(10_800.0, rel=0.02)
    assert batch.quantile_s(0.1) > 0.75 * 10_800.0
    assert batch.quantile_s(0.9) < 1.35 * 10_800.0
    assert model.distribution("ping").quantile_s(0.5) < 0.01
    # The table the forecasts read holds the same estimates.
    table = model.table(("USER", "batch_job", "ping"))
    assert table.mu[table.group_of[1]] == pytest.approx(batch.mu)


def test_a_step_seen_once_leans_on_the_tenant_as_much_as_its_steps_agree() -> None:
    # The parent's weight is the evidence's: in a tenant whose steps all take about the
    # same time (between-steps spread small, each step's own runs scattered), a single
    # run far off is mostly noise; in one whose steps differ widely, it is mostly signal.
    rng = np.random.default_rng(1)
    alike = DurationModel(DurationPrior())
    for tool in ("a", "b", "c", "d"):
        for gap in rng.lognormal(mean=1.0, sigma=1.0, size=50):
            alike.observe(tool, float(gap))
    alike.observe("new", math.exp(4.0))
    level = alike.tenant_level().mu
    pull = (4.0 - alike.distribution("new").mu) / (4.0 - level)   # the parent's share
    assert 0.3 < pull < 1.0
    apart = DurationModel(DurationPrior())
    for tool, mu in (("a", -3.0), ("b", 0.0), ("c", 3.0), ("d", 6.0)):
        for gap in rng.lognormal(mean=mu, sigma=0.2, size=50):
            apart.observe(tool, float(gap))
    apart.observe("new", math.exp(4.0))
    level = apart.tenant_level().mu
    assert (4.0 - apart.distribution("new").mu) / (4.0 - level) < 0.05


def test_table_with_gives_a_bucket_the_unnamed_steps_own_distribution() -> None:
    model = DurationModel(DurationPrior())
    for _ in range(40):
        model.observe("slow", 60.0)
    symbols = ("END", "USER", "slow", "<oov>")
    base = model.table(symbols)
    assert model.table_with(symbols, 3, "fresh") is base   # no gaps of its own: the tenant level
    for _ in range(3):
        model.observe("fresh", 0.3)
    base = model.table(symbols)
    table = model.table_with(symbols, 3, "fresh")
    assert table.group_of.tolist() == base.group_of.tolist()[:3] + [base.mu.shape[0]]
    np.testing.assert_allclose(table.membership.sum(axis=1), 1.0)
    np.testing.assert_array_equal(table.cdf_by_grid[:, :-1], base.cdf_by_grid)
    assert math.exp(table.mu[-1]) == pytest.approx(0.3, rel=0.05)
    assert table.mu[-1] == pytest.approx(model.distribution("fresh").mu)
    assert model.table_with(symbols, 3, "fresh") is table   # cached
    model.observe("fresh", 0.3)
    assert model.table_with(symbols, 3, "fresh") is not table   # a new gap: rebuilt


def _quick_tenant(model: DurationModel) -> None:
    """20 quick tools (~0.2 s), 200 runs each."""
    rng = np.random.default_rng(1)
    for _ in range(200):
        for j in range(20):
            model.observe(f"q{j}", 0.2 * math.exp(rng.normal(0.0, 0.3)))


def test_a_steps_forecast_does_not_depend_on_when_the_spread_was_computed() -> None:
    # QA191 N2: a new 60 s tool among quick ones was forecast at 5.9 s by a running model
    # (its spread computed before the tool's first run) and 43 s by a restarted one
    symbols = tuple(f"q{j}" for j in range(20)) + ("<other tool>",)
    running = DurationModel(DurationPrior())
    _quick_tenant(running)
    running.table(symbols)   # the spread is computed now, before the new tool
    for runs in range(1, 6):
        running.observe("slow_export", 60.0)
        restarted = DurationModel.from_arrays(DurationPrior(), *running.to_arrays())
        live, fresh = running.distribution("slow_export"), restarted.distribution("slow_export")
        # the other steps' shares of the spread are as of its computation (up to 5 % of
        # the gaps old): they moved with the tenant's mu by one 60 s gap in 4,000 at most
        assert live.mu == pytest.approx(fresh.mu, rel=1e-5)
        assert live.sigma == pytest.approx(fresh.sigma, rel=1e-5)
        slot = len(symbols) - 1
        live_table = running.table_with(symbols, slot, "slow_export")
        fresh_table = restarted.table_with(symbols, slot, "slow_export")
        np.testing.assert_allclose(live_table.mu[-1], fresh_table.mu[-1], rtol=1e-5)
    # known answer: after 1 run 43.3 s (the restarted model's then), after 5 runs 58.3 s
    one = DurationModel(DurationPrior())
    _quick_tenant(one)
    one.table(symbols)
    one.observe("slow_export", 60.0)
    assert one.distribution("slow_export").quantile_s(0.5) > 40.0
    assert live.quantile_s(0.5) > 55.0
