"""The predictive policy's upkeep over time and its choice of whom to take from.

A mixin of `PredictivePolicy` (predictive.py), split out by concern; it reads and
writes the policy's own state (the attributes declared below) and never calls the
block manager.

- `_maintain`: the due bookkeeping before any decision: the insertion-rate estimate,
  expired pins, forecasts whose horizon passed without a return (scored as misses),
  groups due for re-ranking, and every `replan_interval_s` the reservation plan.
- `_replan`: reservations from each tenant's forecast demand (blocks x P(needed within
  HOT's horizon), plus one block for a tenant holding any); sessions idle longer than
  `session_idle_forget_s` are forgotten.
- `_lowest`: the group to take from: in HOT with reservations active, the cheapest group
  of the tenants above their share, else the requester's own cheapest, else anyone's;
  found in the tier's ranking (`GroupIndex.lowest_accepted`), not by asking every tenant,
  unless more than `MAX_SKIPS` cheaper groups of tenants within their share come first.
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from cache.policies.groups import BlockGroup
from cache.tiers import Tier

if TYPE_CHECKING:
    from cache.policies.groups import GroupIndex
    from cache.policies.pins import PinBook
    from cache.policies.predictive_config import PredictiveConfig
    from cache.policies.reservations import ReservationPlan
    from cache.policies.valuation import SessionState, Valuation


MAX_SKIPS = 32   # cheaper groups of tenants within their share passed over before asking each tenant


class PolicyUpkeep:
    """Time-driven bookkeeping and victim selection of the predictive policy."""

    config: PredictiveConfig
    _index: GroupIndex
    _sessions: dict[str, SessionState]
    _tenants: dict  # tenant -> predictive_trust.TenantState
    _pins: PinBook
    _plan: ReservationPlan
    _valuation: Valuation
    _resolve: list[tuple[float, str]]
    _replanned_at_s: float | None
    _now_s: float

    def _maintain(self, now_s: float) -> None:
        """Due bookkeeping that never calls the manager: rates, pins, outcomes, ranks,
        the reservation plan."""
        self._now_s = max(self._now_s, now_s)
        self._room.update_rate(now_s, self.config.rate_half_life_s)
        self._pins.expire(now_s)
        resolve = self._resolve
        while resolve and resolve[0][0] < now_s:
            until_s, name = heapq.heappop(resolve)
            session = self._sessions.get(name)
            if session is not None and session.predicted_p is not None and session.predicted_until_s == until_s:
                self._tenant(session.tenant).accuracy.add(session.predicted_p, False, self.config.accuracy_alpha)
                session.predicted_p = None
        for group in self._index.pop_due(now_s):
            self._rank(group, now_s)
        replanned_s = self._replanned_at_s
        if self._room.capacity[0] and (replanned_s is None or now_s - replanned_s >= self.config.replan_interval_s):
            self._replanned_at_s = now_s
            self._replan(now_s)

    def _replan(self, now_s: float) -> None:
        """Re-plan reservations from forecast demand (once HOT has filled, so its size is
        known); forget long-idle sessions."""
        demands: dict[str, float] = {}
        horizon = self.horizon_s(Tier.HOT)
        for group in self._index.groups():
            p = self._valuation.p_needed(group.tenant, group.sessions, now_s, group.last_use_s, horizon)
            demands[group.tenant] = demands.get(group.tenant, 0.0) + p * len(group.blocks)
        for tenant, state in self._tenants.items():
            if state.num_hot > 0:
                demands[tenant] = demands.get(tenant, 0.0) + 1.0
        self._plan.plan(self._room.capacity[0], demands, now_s)
        cutoff = now_s - self.config.session_idle_forget_s
        stale = [name for name, session in self._sessions.items()
                 if session.last_use_s < cutoff and (session.curve is None or session.curve.made_at_s < cutoff)
                 and not self._pins.is_pinned(name, now_s)]
        for name in stale:
            del self._sessions[name]

    def _lowest(self, tier: Tier, requester: str | None) -> tuple[float, BlockGroup] | None:
        """The lowest-valued group to take from, honouring HOT reservations."""
        index = self._index
        if tier is Tier.HOT and self._plan.is_active:
            plan, tenants = self._plan, self._tenants

            def is_over(tenant: str) -> bool:
                return plan.is_over(tenant, tenants[tenant].num_hot)

            settled, best = index.lowest_accepted(tier, is_over, MAX_SKIPS)
            if not settled:   # many cheaper groups of tenants within their share: ask the others
                tops = (index.top(tier, tenant) for tenant in index.tenants(tier) if is_over(tenant))
                best = min((top for top in tops if top is not None), key=lambda top: (top[0], top[1].version),
                           default=None)
            if best is not None:
                return best
            if requester is not None:
                own = index.top(tier, requester)
                if own is not None:
                    return own
        return index.lowest(tier)
