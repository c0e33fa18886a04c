"""How long a step takes: log-normal gaps per (tenant, step), with hierarchical shrinkage.

The gap of a step is the time from the previous response's end to the request the step
led to (a tool's run time, or the user's think time for `USER`). Per tenant we keep the
sufficient statistics of log(gap) per step symbol and for all steps together, and
estimate as Normal-on-log:

    global prior (config)  ->  tenant, all steps  ->  tenant, this step

The tenant level takes the prior as `strength` pseudo-gaps, so a new tenant leans on the
prior. A step leans on the tenant level by the evidence (empirical Bayes, normal-normal):
its mean log gap is a priori N(tenant mu, between-steps variance), its gaps scatter
around that mean with its own variance (its spread, shrunk toward the tenant's pooled
within-step spread), so the tenant level weighs as within ÷ between pseudo-gaps. A step
seen once in a tenant whose steps differ little leans on the tenant's typical gap; a
step whose many runs agree follows them however far the tenant's other steps are (QA188
F3: 3 h runs among short steps were forecast at 35 min with a fixed 3 pseudo-gaps).
`END` is no step: the "gap" before it is the idle time after which the session was
declared over (at least `session_idle_timeout_s`), not a duration of anything, and is
never learned (QA160: as a tenant-level gap it made every tool's forecast minutes long).
A step's estimate leans on the spread with its own share as of now (`step_spread`); the
other steps' shares are up to REBUILD_FRACTION of the gaps old.
Invariants: sigma > 0; stats are updated online in O(1) per gap and never refitted;
no statistic holds an `END` gap; a step with gaps of its own is forecast from them (as
shrunk above), also when the vocabulary does not name it (`table_with`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

from cache.forecast import END_SYMBOL
from cache.gap_stats import pooled_variance

from .gap_distributions import MIN_SIGMA, DurationPrior, GapStats, LogNormal, SpreadSums, StepSpread

REBUILD_FRACTION = 0.05
MAX_EXTRA_TABLES = 32
LOG_GRID_S = np.linspace(math.log(1e-3), math.log(1e5), 161)
_NO_TERMS = (0.0, 0.0, 0.0)


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
        self._spread: SpreadSums | None = None
        # Per base table: (slot, symbol) -> (the symbol's gaps then, `table_with`'s table).
        self._with: tuple[DurationTable | None, dict] = (None, {})

    def observe(self, symbol: str, gap_s: float) -> None:
        """Learn one step's gap; `END`'s idle time and a gap that is not a finite,
        non-negative number of seconds are left out."""
        if symbol == END_SYMBOL or not math.isfinite(gap_s) or gap_s < 0.0:
            return
        self.all_steps.add(gap_s)
        self.by_symbol.setdefault(symbol, GapStats()).add(gap_s)

    def tenant_level(self) -> LogNormal:
        return self.all_steps.shrunk(self.prior.as_lognormal(), self.prior.strength)

    def spread(self) -> StepSpread:
        """The tenant's `StepSpread` over all its steps (`_sums`)."""
        return self._sums().spread

    def _sums(self) -> SpreadSums:
        """The tenant's `StepSpread`, each variance estimated with `prior.strength`
        pseudo-counts at `prior.sigma ** 2` (pseudo-gaps for the pooled within-step
        variance, pseudo-steps for the between-steps one, a step's share of which is
        its squared distance from the tenant's mu less its mean's sampling variance),
        with the sums it came from. Recomputed (one pass over the steps) on `table`'s
        rule: when the gaps seen since reach `REBUILD_FRACTION` of all gaps; a step's
        own estimate does not wait for that (`step_spread`)."""
        total = self.all_steps.num_gaps
        cached = self._spread
        if cached is not None and total - cached.num_gaps < max(1.0, REBUILD_FRACTION * total):
            return cached
        parent = self.tenant_level()
        k, prior_var = self.prior.strength, self.prior.sigma ** 2
        names = [name for name, g in self.by_symbol.items() if g.num_gaps > 0.0]
        rows = np.array([(g.num_gaps, g.sum_log, g.sum_log_sq)
                         for g in map(self.by_symbol.__getitem__, names)],
                        dtype=np.float64).reshape(-1, 3)
        n, sums = rows[:, 0], rows[:, 1]
        means = sums / n
        own_ss = np.maximum(rows[:, 2] - sums * means, 0.0)
        within_ss, within_df = float(own_ss.sum()), float((n - 1.0).sum())
        within = _pooled(within_ss, within_df, k, prior_var)
        excess = np.maximum((means - parent.mu) ** 2 - within / n, 0.0)
        between = _pooled(float(excess.sum()), float(len(n)), k, prior_var)
        terms = dict(zip(names, zip(own_ss.tolist(), (n - 1.0).tolist(), excess.tolist())))
        cached = SpreadSums(total, StepSpread(parent, within, between), within_ss, within_df,
                            float(excess.sum()), float(len(n)), terms)
        self._spread = cached
        return cached

    def step_spread(self, symbol: str, stats: GapStats | None = None) -> StepSpread:
        """The `StepSpread` a step's estimate leans on: the tenant's (`_sums`, up to
        `REBUILD_FRACTION` of the gaps old) with this step's share of each sum taken as
        of now, and the tenant's level as of now, in O(1). So a step's forecast follows
        its own gaps at once, as a freshly computed spread (a restart) gives it, not
        after 5 % more of the tenant's gaps (QA191 N2: a new 60 s tool among quick ones
        was forecast at 5.9 s live, 43 s after a restart, on the same gaps)."""
        stats = self.by_symbol.get(symbol) if stats is None else stats
        cached = self._sums()
        parent = self.tenant_level()
        n = 0.0 if stats is None else stats.num_gaps
        if n <= 0.0:
            return StepSpread(parent, cached.spread.within_var, cached.spread.between_var)
        k, prior_var = self.prior.strength, self.prior.sigma ** 2
        old_ss, old_df, old_excess = cached.terms.get(symbol, _NO_TERMS)
        mean = stats.sum_log / n
        own_ss = max(stats.sum_log_sq - stats.sum_log * mean, 0.0)
        within = _pooled(cached.within_ss - old_ss + own_ss,
                         cached.within_df - old_df + (n - 1.0), k, prior_var)
        excess = max((mean - parent.mu) ** 2 - within / n, 0.0)
        steps = cached.steps - (symbol in cached.terms) + 1.0
        between = _pooled(max(cached.excess - old_excess, 0.0) + excess, steps, k, prior_var)
        return StepSpread(parent, within, between)

    def _estimate(self, symbol: str, stats: GapStats) -> LogNormal:
        return stats.toward(self.step_spread(symbol, stats), self.prior.strength)

    def distribution(self, symbol: str) -> LogNormal:
        stats = self.by_symbol.get(symbol)
        return self.tenant_level() if stats is None else self._estimate(symbol, stats)

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
                dist = self._estimate(symbol, stats)
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

    def table_with(self, symbols: tuple[str, ...], slot: int, symbol: str) -> DurationTable:
        """`table(symbols)` with the bucket at index `slot` (`<oov>`, `<other tool>`)
        standing for `symbol`, a step the vocabulary does not name (QA188 F1: a tool new
        since the last fit, or past the tool cap): the slot gets `symbol`'s own
        distribution as one more group. `table(symbols)` itself when `symbol` has no
        gaps. Kept per base table for up to `MAX_EXTRA_TABLES` (slot, symbol) pairs,
        and rebuilt (one CDF column) when the symbol has learned a gap since."""
        base = self.table(symbols)
        stats = self.by_symbol.get(symbol)
        if stats is None or stats.num_gaps <= 0.0:
            return base
        if self._with[0] is not base:
            self._with = (base, {})
        cached = self._with[1].get((slot, symbol))
        if cached is not None and cached[0] == stats.num_gaps:
            return cached[1]
        dist = self._estimate(symbol, stats)
        group = base.mu.shape[0]
        column = ndtr((LOG_GRID_S - dist.mu) / dist.sigma)
        group_of = base.group_of.copy()
        group_of[slot] = group
        membership = np.zeros((len(symbols), group + 1))
        membership[:, :group] = base.membership
        membership[slot] = 0.0
        membership[slot, group] = 1.0
        table = DurationTable(np.append(base.mu, dist.mu), np.append(base.sigma, dist.sigma),
                              group_of, membership,
                              np.ascontiguousarray(np.column_stack((base.cdf_by_grid, column))))
        extra = self._with[1]
        if len(extra) >= MAX_EXTRA_TABLES:
            extra.clear()
        extra[(slot, symbol)] = (stats.num_gaps, table)
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


def _pooled(sum_sq: float, count: float, strength: float, prior_var: float) -> float:
    """`pooled_variance` with the predictor's sigma floor."""
    return pooled_variance(sum_sq, count, strength, prior_var, MIN_SIGMA)


def _without(total: GapStats, part: GapStats) -> GapStats:
    """`total` with the gaps of `part` (a subset of them) taken out; nothing left when
    `part` holds as many gaps or more (rounding cannot leave a negative count)."""
    num = total.num_gaps - part.num_gaps
    if num < 0.5:
        return GapStats()
    return GapStats(num, total.sum_log - part.sum_log,
                    max(total.sum_log_sq - part.sum_log_sq, 0.0))
