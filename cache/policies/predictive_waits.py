"""The predictive policy's session waits: a session's pin while it is away, and its end.

A mixin of `PredictivePolicy` (predictive.py), split out by concern; it reads and
writes the policy's own state (the attributes declared below) and never calls the
block manager.

- `_pin`: a trusted forecast whose next step is a tool call pins the session's HOT
  blocks until its `pin_quantile` return time (at most `max_pin_s`), at no less than
  their value at the start of the call (pins.py); a tenant pins at most `pin_cap_frac`
  of its reservation (of HOT while none is planned; no cap before HOT has filled).
- `_returned`: a request of the session arrived: its pending forecast is scored
  (returned within the horizon, or not) and its wait ends.
- `_end_wait`: the session no longer waits here (it returned, or moved to another
  worker): its forecast, pin and prefetch go.

Invariants: a wait ends only through `_end_wait`, which leaves the session without a
curve, return times, pin or scheduled prefetch (a pin may lapse sooner, at its deadline:
predictive_upkeep.py); a forecast is scored at most once, here or as a miss in upkeep
(its `predicted_p` is cleared when scored).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from cache.policies.valuation import SessionState
from cache.tiers import Tier

if TYPE_CHECKING:
    from cache.forecast import Forecast
    from cache.policies.groups import BlockGroup
    from cache.policies.pins import PinBook, PinCounts
    from cache.policies.predictive_config import PredictiveConfig
    from cache.policies.prefetch import PrefetchTracker
    from cache.policies.reservations import ReservationPlan
    from cache.policies.valuation import TierRoom, Valuation


class SessionWaits:
    """How the predictive policy starts and ends a session's wait to come back."""

    config: PredictiveConfig
    _sessions: dict[str, SessionState]
    _pins: PinBook
    _plan: ReservationPlan
    _prefetch: PrefetchTracker
    _valuation: Valuation
    _room: TierRoom

    def pin_counts(self) -> PinCounts:
        """Pins set and refused (over the tenant's cap) since start."""
        return self._pins.counts()

    def pinned_blocks(self) -> dict[str, int]:
        """Each tenant's blocks under live pins (counted against its cap)."""
        return self._pins.pinned_blocks()

    def _returned(self, name: str, tenant: str, now_s: float) -> None:
        """A request of session `name` arrived: its wait (and pin, prefetch) is over."""
        session = self._sessions.get(name)
        if session is None:
            self._sessions[name] = SessionState(tenant, now_s)
            return
        if session.last_use_s == now_s and session.curve is None and not session.moved:
            return
        session.moved = False
        if session.predicted_p is not None:
            returned = now_s <= session.predicted_until_s
            self._tenant(tenant).accuracy.add(session.predicted_p, returned, self.config.accuracy_alpha)
            session.predicted_p = None
        session.last_use_s = now_s
        self._end_wait(name, session)

    def _end_wait(self, name: str, session: SessionState) -> None:
        """The session no longer waits here to come back: its forecast, pin and
        prefetch go."""
        session.curve = None
        self._valuation.forget()
        session.return_soon_s = None
        session.return_late_s = None
        session.has_prefetched = False
        self._pins.unpin(name)
        self._prefetch.cancel(name)

    def _pin(self, name: str, tenant: str, forecast: Forecast, group: BlockGroup | None, now_s: float) -> None:
        cfg = self.config
        ttl_s = forecast.eta_s(cfg.pin_quantile)
        if ttl_s is None or group is None or not math.isfinite(ttl_s):   # (a NaN ETA: no pin)
            return
        until_s = forecast.made_at_s + min(ttl_s, cfg.max_pin_s)
        if until_s <= now_s:
            return
        if self._plan.is_active:
            cap = cfg.pin_cap_frac * self._plan.reserved(tenant)
        elif self._room.capacity[0]:
            cap = cfg.pin_cap_frac * self._room.capacity[0]
        else:  # HOT has not filled yet: no cap but the one that forbids pins (0 x inf is nan)
            cap = math.inf if cfg.pin_cap_frac > 0 else 0.0
        floor = self._value_of(tenant, (name,), Tier.HOT, now_s, now_s)
        self._pins.pin(name, tenant, until_s, len(group.blocks), cap, floor)
