"""A gap forecaster's statistics by level, indexed by tenant.

A level key is a tuple: `()` for all tenants, else the tenant's name first, then the step
and context features (`cache.gap_forecaster` builds them). Per level: log-gap sums
(`gaps`), return counts (`returns`) and the last recount's censored P(return)
(`p_estimates`); per tenant the waits it has seen (`steps`). Per gap level, its children's
`LevelSpread` (`spread`), kept until the level learns another gap: it is a function of the
sums alone, so a forecaster restored from them forecasts as the original did.

Invariants: every non-empty key in any of the three maps is listed in its tenant's
index (`levels_of`), and every gap level under its parent's (`children`), so one tenant's
statistics are copied, or re-estimated, without scanning the others'; a tenant's change mark grows whenever the forecaster changes its
gaps, counts or waits (`changed`; a recount's new estimates alone do not count), and a
changed tenant is `unsettled` until the next recount takes it; nothing does I/O.
"""
from __future__ import annotations

from collections.abc import Iterable

from cache.gap_memory import LearnedGaps
from cache.gap_stats import LevelSpread, LogGapStats, ReturnCounts, level_spread


class GapLevels:
    __slots__ = ("gaps", "returns", "p_estimates", "steps", "_levels_of", "_changes", "_unsettled",
                 "_children", "_spreads")

    def __init__(self) -> None:
        self.gaps: dict[tuple, LogGapStats] = {}
        self.returns: dict[tuple, ReturnCounts] = {}
        self.p_estimates: dict[tuple, float] = {}
        self.steps: dict[str, set[str]] = {}
        self._levels_of: dict[str, dict[tuple, None]] = {}   # tenant -> its level keys (ordered set)
        self._changes: dict[str, int] = {}
        self._unsettled: set[str] = set()   # tenants whose estimates a recount must redo
        self._children: dict[tuple, dict[tuple, None]] = {}   # gap level -> its children's keys
        self._spreads: dict[tuple, tuple[float, LevelSpread]] = {}   # level -> (its gaps then, spread)

    def gap_stats(self, level: tuple) -> LogGapStats:
        """The level's gap sums, created empty if new."""
        stats = self.gaps.get(level)
        if stats is None:
            stats = self.gaps[level] = LogGapStats()
            self.index(level)
            if level:
                self._children.setdefault(level[:-1], {})[level] = None
        return stats

    def spread(self, level: tuple, strength: float, prior_var: float) -> LevelSpread:
        """The `LevelSpread` of `level`'s children around the level's mean log gap
        (`level_spread`), redone (one pass over its children) when the level has learned
        a gap since (each of its children's gaps is one of its own), else as it was."""
        stats = self.gaps.get(level)
        total = 0.0 if stats is None else stats.num_gaps
        cached = self._spreads.get(level)
        if cached is not None and cached[0] == total:
            return cached[1]
        gaps = self.gaps
        mu = stats.sum_log / total if total > 0.0 else 0.0
        spread = level_spread(mu, (gaps[child] for child in self._children.get(level, ())), strength, prior_var)
        self._spreads[level] = (total, spread)
        return spread

    def return_counts(self, level: tuple) -> ReturnCounts:
        """The level's return counts, created empty if new."""
        counts = self.returns.get(level)
        if counts is None:
            counts = self.returns[level] = ReturnCounts()
            self.index(level)
        return counts

    def index(self, level: tuple) -> None:
        """List `level` under its tenant (for a key set directly, as a recount's estimates)."""
        if level:
            self._levels_of.setdefault(level[0], {})[level] = None

    def levels_of(self, tenant: str) -> Iterable[tuple]:
        return self._levels_of.get(tenant, ())

    def changed(self, tenant: str) -> None:
        self._changes[tenant] = self._changes.get(tenant, 0) + 1
        self._unsettled.add(tenant)

    def unsettle(self, tenant: str) -> None:
        """The tenant's estimates must be redone, though nothing a save keeps changed."""
        self._unsettled.add(tenant)

    def take_unsettled(self) -> set[str]:
        """The tenants changed since the last call (which a recount then settles)."""
        unsettled, self._unsettled = self._unsettled, set()
        return unsettled

    def change_marks(self) -> dict[str, int]:
        """Per tenant, a count that grows with every change of its statistics: a tenant
        whose mark is the one it had when last saved need not be saved again."""
        return dict(self._changes)

    def learned(self, return_features: tuple[int, ...], tenants: Iterable[str] | None = None) -> LearnedGaps:
        """Copies of every level's statistics; with `tenants`, only theirs and the
        all-tenant level (work in proportion to their levels)."""
        if tenants is None:
            keys: Iterable[tuple] = dict.fromkeys((*self.gaps, *self.returns, *self.p_estimates))
            tenants = list(self.steps)
        else:
            tenants = [t for t in tenants if t in self.steps]
            keys = [(), *(level for t in tenants for level in self._levels_of.get(t, ()))]
        learned = LearnedGaps(return_features, steps={t: set(self.steps[t]) for t in tenants})
        for key in keys:
            stats, counts, p = self.gaps.get(key), self.returns.get(key), self.p_estimates.get(key)
            if stats is not None:
                learned.gaps[key] = LogGapStats(stats.num_gaps, stats.sum_log, stats.sum_log_sq)
            if counts is not None:
                learned.returns[key] = ReturnCounts(counts.num_returned, counts.num_ended)
            if p is not None:
                learned.p_estimates[key] = p
        return learned

    def adopt(self, learned: LearnedGaps) -> None:
        """Replace every statistic with (copies of) `learned`'s; every tenant in it counts
        as changed."""
        self.gaps, self.returns = dict(learned.gaps), dict(learned.returns)
        self.p_estimates = dict(learned.p_estimates)
        self.steps = {t: set(steps) for t, steps in learned.steps.items()}
        self._levels_of, self._children, self._spreads = {}, {}, {}
        for key in (*self.gaps, *self.returns, *self.p_estimates):
            self.index(key)
        for key in self.gaps:
            if key:
                self._children.setdefault(key[:-1], {})[key] = None
        for tenant in self.steps:
            self.changed(tenant)
