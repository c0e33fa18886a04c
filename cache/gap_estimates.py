"""The shrunk estimates a `GapForecaster` reads for a waiting session: its gap
distribution and its P(return), each level by level from all tenants down (the levels'
statistics: cache.gap_levels; what the levels are: the forecaster's docstring).

`GapEstimates` is a part of `cache.gap_forecaster.GapForecaster` (a base class), kept
apart so that each file holds one concept: the forecaster learns, this reads. It uses the
forecaster's `config`, `_prior`, `_stats` and `_return_features`, and changes nothing.

Invariants: a gap estimate starts from the prior and shrinks toward each level that has
statistics, each with `strength` pseudo-gaps of the level above, except a step's location
(mu): that leans on the tenant level by the evidence (`LogGapStats.toward` with the
spread of the tenant's steps, `GapLevels.spread`), so a tool whose runs agree is forecast
at their median however far the tenant's other steps are (its sigma, and a depth's
estimate, as before: measured, evidence-weighting those too was worse, FI117);
then it shrinks toward the session's own gaps at its step (location only); P(return)
starts from the deepest level with a censored estimate (else the prior) and shrinks
toward the return counts of each deeper level; it is always in [0, 1].
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from cache.gap_stats import LogNormalGap

if TYPE_CHECKING:
    from cache.gap_forecaster import _Waiting


class GapEstimates:
    """Estimate readers of a `GapForecaster` (the module docstring says what they read)."""

    def gap_distribution(self, tenant: str, step: str, context: tuple[int, ...] = (0,)) -> LogNormalGap:
        """The shrunk gap estimate for a step in a context (without any session's own
        history)."""
        gap = self._prior
        strength, prior_var = self.config.strength, self.config.prior_sigma ** 2
        for level in self._gap_levels(tenant, step, context):
            stats = self._stats.gaps.get(level)
            if stats is None:
                continue
            shrunk = stats.shrunk(gap, strength)
            if len(level) == 2:   # (tenant, step): its location by the evidence
                spread = self._stats.spread(level[:-1], strength, prior_var)
                shrunk = LogNormalGap(stats.toward(gap, spread, strength).mu, shrunk.sigma)
            gap = shrunk
        return gap

    def _gap(self, tenant: str, waiting: _Waiting) -> LogNormalGap:
        gap = self.gap_distribution(tenant, waiting.step, waiting.context)
        own = waiting.own.get(waiting.step)
        if own is not None:
            strength = self.config.session_strength
            gap = LogNormalGap((own.sum_log + strength * gap.mu) / (own.num_gaps + strength), gap.sigma)
        return gap

    def _p_return(self, tenant: str, waiting: _Waiting) -> float:
        levels = self._levels(tenant, waiting.step, waiting.context)
        for i in range(len(levels) - 1, -1, -1):
            found = self._stats.p_estimates.get(levels[i])
            if found is not None:
                p = found
                break
        else:
            p, i = self.config.prior_p_return, -1
        for level in levels[i + 1:]:
            counts = self._stats.returns.get(level)
            if counts is not None:
                p = counts.shrunk(p, self.config.return_strength)
        return min(1.0, max(0.0, p))

    def _levels(self, tenant: str, step: str, context: tuple[int, ...]) -> tuple[tuple, ...]:
        """Levels of P(return): all, tenant, step, then one more per context feature."""
        levels = [(), (tenant,), (tenant, step)]
        chosen: tuple = ()
        for i in self._return_features:
            if context[i] is not None:
                chosen += (context[i],)
                levels.append((tenant, step, *chosen))
        return tuple(levels)

    @staticmethod
    def _gap_levels(tenant: str, step: str, context: tuple[int, ...]) -> tuple[tuple, ...]:
        """Levels of the gap distribution: all, tenant, step, step at this depth (the
        prompt size would only split the data: a tool runs as long at any size)."""
        return ((), (tenant,), (tenant, step), (tenant, step, context[0]))
