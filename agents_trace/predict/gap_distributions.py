"""The gap distributions of the duration model (durations.py): a log-normal gap, the
global prior, a tenant's spread of its steps' log gaps, and the sufficient statistics the
model keeps per step.

Invariant: every `LogNormal` made here has sigma >= MIN_SIGMA > 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from cache.gap_stats import LevelSpread, LogGapStats

MIN_SIGMA = 0.05
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


@dataclass(frozen=True, slots=True)
class StepSpread:
    """A tenant's level and how its steps' log gaps spread: `within_var` around each
    step's own mean (pooled over its steps), `between_var` of the steps' means around
    `parent.mu`. Both >= MIN_SIGMA ** 2."""

    parent: LogNormal
    within_var: float
    between_var: float


@dataclass(frozen=True, slots=True)
class SpreadSums:
    """What `DurationModel.spread` summed, as of `num_gaps` gaps of the tenant: over its
    steps with gaps (`steps` of them), the squared deviations from their own means
    (`within_ss`, with `within_df` degrees of freedom) and their means' excess squared
    distances from the tenant's mu (`excess`); `terms[symbol]`: that step's share of
    each, (within_ss, within_df, excess)."""

    num_gaps: float
    spread: StepSpread
    within_ss: float
    within_df: float
    excess: float
    steps: float
    terms: dict[str, tuple[float, float, float]]


class GapStats(LogGapStats):
    """Sufficient statistics of log gaps (the cache's `LogGapStats`), estimating the
    predictor's `LogNormal` with its own sigma floor."""

    __slots__ = ()

    def shrunk(self, parent: LogNormal, strength: float) -> LogNormal:
        """Posterior-mean style estimate: `strength` pseudo-gaps drawn from `parent`."""
        estimate = LogGapStats.shrunk(self, parent, strength, MIN_SIGMA)
        return LogNormal(estimate.mu, max(estimate.sigma, MIN_SIGMA))

    def toward(self, spread: StepSpread, weight: float) -> LogNormal:
        """The cache's normal-normal estimate (`LogGapStats.toward`) of this step's gaps
        under `spread`, with the predictor's sigma floor; with no gaps, `spread.parent`."""
        if self.num_gaps <= 0.0:
            return spread.parent
        estimate = LogGapStats.toward(self, spread.parent, LevelSpread(spread.within_var, spread.between_var),
                                      weight, MIN_SIGMA)
        return LogNormal(estimate.mu, estimate.sigma)
