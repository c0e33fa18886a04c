"""Online estimates of return gaps (log-normal) and return odds, with shrinkage.

Both estimates borrow strength from a parent level, so a key seen once leans on its parent
and a new tenant on the global prior:

    prior -> all tenants -> tenant -> (tenant, step) -> (tenant, step, depth) [-> session]

A level either takes its parent as `strength` pseudo-observations (`shrunk`), or leans on
it by the evidence (`toward`, empirical Bayes, normal-normal): its mean log gap is a
priori Normal(parent mu, `between_var`), the spread of the parent's children's means, so
the parent weighs as within ÷ between pseudo-gaps (`LevelSpread`, from the children's
sums alone): a key seen once among siblings that differ little leans on the parent; one
whose many gaps agree follows them however far its siblings are.

Invariants: every update is O(1) and nothing is ever refitted; sigma >= MIN_SIGMA; a
learned log gap is within [log MIN_GAP_S, log MAX_GAP_S], so every estimate's quantiles
stay far from a float's range;
probabilities stay in [0, 1]; the sums stay finite (a gap that is not finite is not
learned: one NaN or infinity would make every later estimate of its levels NaN).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

MIN_GAP_S = 1e-3
MAX_GAP_S = 1e9   # ~32 years: a longer "gap" is a clock's error; learned as this (its log a bounded sum)
MIN_SIGMA = 0.1
RETURN_Z_POINTS = (-3.0, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)
_NORMAL = NormalDist()


@dataclass(frozen=True, slots=True)
class LogNormalGap:
    """log(gap_s) ~ Normal(mu, sigma^2)."""

    mu: float
    sigma: float

    @property
    def median_s(self) -> float:
        return math.exp(self.mu)

    def quantile_s(self, q: float) -> float:
        return math.exp(self.mu + self.sigma * _NORMAL.inv_cdf(q))

    def return_points(self, p_return: float, shift_s: float = 0.0) -> tuple[tuple[float, float], ...]:
        """(h, P(returned within h)) for a session that returns with `p_return` after
        `shift_s` plus this gap, at RETURN_Z_POINTS standard deviations of the log gap."""
        return tuple((shift_s + math.exp(self.mu + self.sigma * z), p_return * _NORMAL.cdf(z))
                     for z in RETURN_Z_POINTS)

    def eta_quantiles(self, quantiles: tuple[float, ...], shift_s: float = 0.0) -> tuple[tuple[float, float], ...]:
        """(q, seconds by which a returning session is back with probability q)."""
        return tuple((q, shift_s + self.quantile_s(q)) for q in quantiles)


@dataclass(frozen=True, slots=True)
class LevelSpread:
    """How a level's children's log gaps spread: `within_var` around each child's own
    mean (pooled over the children), `between_var` of the children's means around the
    level's mu. Both >= MIN_SIGMA ** 2."""

    within_var: float
    between_var: float


@dataclass(slots=True)
class LogGapStats:
    """Sufficient statistics of log gaps (count, sum, sum of squares)."""

    num_gaps: float = 0.0
    sum_log: float = 0.0
    sum_log_sq: float = 0.0

    def add(self, gap_s: float) -> None:
        """Learn one gap (within [MIN_GAP_S, MAX_GAP_S]); one that is not finite is left out."""
        if not math.isfinite(gap_s):
            return
        x = math.log(min(max(gap_s, MIN_GAP_S), MAX_GAP_S))
        self.num_gaps += 1.0
        self.sum_log += x
        self.sum_log_sq += x * x

    def shrunk(self, parent: LogNormalGap, strength: float,
               min_sigma: float = MIN_SIGMA) -> LogNormalGap:
        """Normal-on-log estimate with `strength` pseudo-gaps drawn from `parent` (any
        record with `mu` and `sigma`); with no gaps seen, `parent` itself."""
        n = self.num_gaps
        if n == 0.0:
            return parent
        mu = (self.sum_log + strength * parent.mu) / (n + strength)
        spread = (self.sum_log_sq - 2.0 * mu * self.sum_log + n * mu * mu
                  + strength * (parent.sigma ** 2 + (parent.mu - mu) ** 2))
        return LogNormalGap(mu, max(math.sqrt(max(spread, 0.0) / (n + strength)), min_sigma))

    def toward(self, parent: LogNormalGap, spread: LevelSpread, weight: float,
               min_sigma: float = MIN_SIGMA) -> LogNormalGap:
        """Normal-normal estimate of this key's gaps, a child of `parent`'s level whose
        children spread as `spread`; with no gaps seen, `parent` itself. Its variance is
        its own spread with `weight` pseudo-degrees of freedom at `spread.within_var`; mu
        is the precision-weighted mean of its mean (n ÷ variance) and the parent's
        (1 ÷ `between_var`); sigma is that of one more gap (variance plus mu's posterior
        variance)."""
        n = self.num_gaps
        if n <= 0.0:
            return parent
        mean = self.sum_log / n
        own_ss = max(self.sum_log_sq - self.sum_log * mean, 0.0)
        var = max((own_ss + weight * spread.within_var) / max(n - 1.0 + weight, 1.0), min_sigma * min_sigma)
        precision = n / var + 1.0 / spread.between_var
        mu = (n / var * mean + parent.mu / spread.between_var) / precision
        return LogNormalGap(mu, max(math.sqrt(var + 1.0 / precision), min_sigma))


def level_spread(mu: float, children: Iterable[LogGapStats], strength: float, prior_var: float) -> LevelSpread:
    """The `LevelSpread` of a level whose mu is `mu`, from its children's sums (those with
    no gaps left out); each variance with `strength` pseudo-counts at `prior_var`
    (pseudo-gaps for the pooled within variance, pseudo-children for the between one, a
    child's share of which is its mean's squared distance from `mu` less that mean's
    sampling variance). One pass over the children."""
    within_ss = within_df = 0.0
    rows = []
    for child in children:
        n = child.num_gaps
        if n > 0.0:
            mean = child.sum_log / n
            within_ss += max(child.sum_log_sq - child.sum_log * mean, 0.0)
            within_df += n - 1.0
            rows.append((n, mean))
    within = pooled_variance(within_ss, within_df, strength, prior_var)
    excess = sum(max((mean - mu) ** 2 - within / n, 0.0) for n, mean in rows)
    return LevelSpread(within, pooled_variance(excess, float(len(rows)), strength, prior_var))


def pooled_variance(sum_sq: float, count: float, strength: float, prior_var: float,
                    min_sigma: float = MIN_SIGMA) -> float:
    """A variance from `count` squared deviations summing to `sum_sq` and `strength`
    pseudo-counts at `prior_var`; `prior_var` with neither; at least `min_sigma` ** 2."""
    weight = count + strength
    var = (sum_sq + strength * prior_var) / weight if weight > 0.0 else prior_var
    return max(var, min_sigma * min_sigma)


@dataclass(slots=True)
class ReturnCounts:
    """How many waits ended in a return, and how many were given up as session ends."""

    num_returned: float = 0.0
    num_ended: float = 0.0

    @property
    def num_resolved(self) -> float:
        return self.num_returned + self.num_ended

    def shrunk(self, parent_p: float, strength: float) -> float:
        return (self.num_returned + strength * parent_p) / (self.num_resolved + strength)


def censored_p_return(counts: ReturnCounts, pending_done: Sequence[float] | np.ndarray, parent_p: float,
                      strength: float, num_iter: int = 6) -> float:
    """P(a wait ends in a return), counting still-pending waits as censored.

    `pending_done[i]` is F(e_i): the chance a returning session would have come back
    within the time wait i has already lasted. Maximises (by EM from the resolved-only
    estimate) the likelihood p^R (1-p)^E prod(1 - p F(e_i)), with `strength` pseudo-waits
    at `parent_p`. Without the pending term, early in a trace every quick return counts
    while no wait has lasted long enough to count as an end, and P(return) drifts to 1,
    which keeps dead sessions' blocks forever. Each EM step is one numpy pass over the
    pending waits (a gateway may have tens of thousands of them).
    """
    p = counts.shrunk(parent_p, strength)
    done = np.asarray(pending_done, dtype=np.float64)
    total = counts.num_resolved + len(done) + strength
    base = counts.num_returned + strength * parent_p
    if len(done) == 0:
        return min(1.0, max(0.0, base / total))
    for _ in range(num_iter):
        alive = 1.0 - p * done
        counted = alive > 1e-12
        still = float(np.sum(p * (1.0 - done[counted]) / alive[counted]))
        p = (base + still) / total
    return min(1.0, max(0.0, p))
