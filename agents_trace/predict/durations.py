"""How long a step takes: log-normal gaps per (tenant, step), with hierarchical shrinkage.

The gap of a step is the time from the previous response's end to the request the step
led to (a tool's run time, or the user's think time for `USER`). Per tenant we keep the
sufficient statistics of log(gap) per step symbol and for all steps together, and
estimate as Normal-on-log with the parent as `strength` pseudo-observations:

    global prior (config)  ->  tenant, all steps  ->  tenant, this step

so a step seen once leans on the tenant's typical gap, and a new tenant on the prior.
`END` is no step: the "gap" before it is the idle time after which the session was
declared over (at least `session_idle_timeout_s`), not a duration of anything, and is
never learned (QA160: as a tenant-level gap it made every tool's forecast minutes long).
Invariants: sigma > 0; stats are updated online in O(1) per gap and never refitted;
no statistic holds an `END` gap.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from scipy.special import ndtr

from cache.forecast import END_SYMBOL
from cache.gap_stats import LogGapStats

MIN_SIGMA = 0.05
REBUILD_FRACTION = 0.05
LOG_GRID_S = np.linspace(math.log(1e-3), math.log(1e5), 161)
_STD_NORMAL = NormalDist()


@dataclass(frozen=True, slots=True)
class LogNormal:
    """log(T) ~ Normal(mu, sigma^2), T in seconds."""

    mu: float
    sigma: float

    def cdf(self, t_s: float) -> float:
        if t_s <= 0.0:
            return 0.0
        return _STD_NORMAL.cdf((math.log(t_s) - self.mu) / self.sigma)

    def quantile_s(self, q: float) -> float:
        return math.exp(self.mu + self.sigma * _STD_NORMAL.inv_cdf(q))


@dataclass(frozen=True, slots=True)
class DurationPrior:
    """The global prior: a median gap and a log-scale spread, worth `strength` gaps."""

    median_s: float = 2.0
    sigma: float = 1.0
    strength: float = 3.0

    def as_lognormal(self) -> LogNormal:
        return LogNormal(math.log(self.median_s), self.sigma)


class GapStats(LogGapStats):
    """Sufficient statistics of log gaps (the cache's `LogGapStats`), estimating the
    predictor's `LogNormal` with its own sigma floor."""

    __slots__ = ()

    def shrunk(self, parent: LogNormal, strength: float) -> LogNormal:
        """Posterior-mean style estimate: `strength` pseudo-gaps drawn from `parent`."""
        estimate = LogGapStats.shrunk(self, parent, strength, MIN_SIGMA)
        return LogNormal(estimate.mu, max(estimate.sigma, MIN_SIGMA))


@dataclass(frozen=True, slots=True)
class DurationTable:
    """Gap distributions of a vocabulary, grouped and tabulated for fast forecasts.

    Group 0 is the tenant-level distribution, shared by every symbol without gaps of its
    own; `group_of[i]` is symbol i's group and `membership` the same as a one-hot
    (symbols x groups) matrix; `cdf_by_grid[j, g]` is group g's CDF at
    `exp(LOG_GRID_S[j])` (grid-major, so one grid point is one contiguous row).
    """

    mu: np.ndarray
    sigma: np.ndarray
    group_of: np.ndarray
    membership: np.ndarray
    cdf_by_grid: np.ndarray


class DurationModel:
    """One tenant's gap statistics. Not thread-safe by itself: the predictor holds the
    tenant lock around `observe` and reads immutable `LogNormal`s / arrays."""

    def __init__(self, prior: DurationPrior) -> None:
        self.prior = prior
        self.all_steps = GapStats()
        self.by_symbol: dict[str, GapStats] = {}
        self._table: tuple[tuple[str, ...], float, DurationTable] | None = None

    def observe(self, symbol: str, gap_s: float) -> None:
        """Learn one step's gap; `END`'s idle time and a gap that is not a finite,
        non-negative number of seconds are left out."""
        if symbol == END_SYMBOL or not math.isfinite(gap_s) or gap_s < 0.0:
            return
        self.all_steps.add(gap_s)
        self.by_symbol.setdefault(symbol, GapStats()).add(gap_s)

    def tenant_level(self) -> LogNormal:
        return self.all_steps.shrunk(self.prior.as_lognormal(), self.prior.strength)

    def distribution(self, symbol: str) -> LogNormal:
        parent = self.tenant_level()
        stats = self.by_symbol.get(symbol)
        return parent if stats is None else stats.shrunk(parent, self.prior.strength)

    def table(self, symbols: tuple[str, ...]) -> "DurationTable":
        """CDF table of the gap distributions of `symbols` (see `DurationTable`).

        NOTE: rebuilt lazily, and only when the vocabulary changed or the gaps seen
        since the last build reach `REBUILD_FRACTION` of all gaps: a busy tenant's
        estimates move slowly, and a rebuild costs one normal CDF per group and grid
        point, too much to pay on every forecast."""
        cached = self._table
        total = self.all_steps.num_gaps
        if cached is not None and cached[0] is symbols and (
                total - cached[1] < max(1.0, REBUILD_FRACTION * total)):
            return cached[2]
        parent = self.tenant_level()
        mu, sigma = [parent.mu], [parent.sigma]
        group_of = np.zeros(len(symbols), dtype=np.int64)
        for i, symbol in enumerate(symbols):
            stats = self.by_symbol.get(symbol)
            if stats is not None:
                dist = stats.shrunk(parent, self.prior.strength)
                group_of[i] = len(mu)
                mu.append(dist.mu)
                sigma.append(dist.sigma)
        mu_a, sigma_a = np.array(mu), np.array(sigma)
        cdf = np.ascontiguousarray(
            ndtr((LOG_GRID_S[:, None] - mu_a[None, :]) / sigma_a[None, :]))
        membership = np.zeros((len(symbols), len(mu)))
        membership[np.arange(len(symbols)), group_of] = 1.0
        table = DurationTable(mu_a, sigma_a, group_of, membership, cdf)
        self._table = (symbols, total, table)
        return table

    def to_arrays(self) -> tuple[list[str], np.ndarray]:
        """Symbols (first entry "" = all steps) and an (n, 3) stats array."""
        names = [""] + sorted(self.by_symbol)
        stats = [self.all_steps] + [self.by_symbol[s] for s in names[1:]]
        return names, np.array([[g.num_gaps, g.sum_log, g.sum_log_sq] for g in stats],
                               dtype=np.float64).reshape(-1, 3)

    @staticmethod
    def from_arrays(prior: DurationPrior, names: list[str], stats: np.ndarray
                    ) -> "DurationModel":
        """The model `to_arrays` wrote. An `END` row (saved before END's idle time was
        left out) is dropped and taken back out of the all-steps sums it was added to."""
        model = DurationModel(prior)
        end_row = None
        for name, row in zip(names, stats):
            gap = GapStats(float(row[0]), float(row[1]), float(row[2]))
            if name == "":
                model.all_steps = gap
            elif name == END_SYMBOL:
                end_row = gap
            else:
                model.by_symbol[name] = gap
        if end_row is not None:
            model.all_steps = _without(model.all_steps, end_row)
        return model


def _without(total: GapStats, part: GapStats) -> GapStats:
    """`total` with the gaps of `part` (a subset of them) taken out; nothing left when
    `part` holds as many gaps or more (rounding cannot leave a negative count)."""
    num = total.num_gaps - part.num_gaps
    if num < 0.5:
        return GapStats()
    return GapStats(num, total.sum_log - part.sum_log,
                    max(total.sum_log_sq - part.sum_log_sq, 0.0))
