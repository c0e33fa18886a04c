"""What a block manager hands to its eviction policy (forecasts, moved sessions, time,
fixed reservations), and its event queue.

`PolicyCalls` is a part of `cache.block_manager.BlockManager` (its base class), kept apart
so that each file holds one concept; it uses the manager's `_policy`, `_clock` and
`_residency`. Invariant: a policy without a hook (LRU has no forecasts or reservations)
is left as it is, and the call says so where the caller needs to know.
"""
from __future__ import annotations

from collections.abc import Mapping

from cache.events import CacheEvent
from cache.forecast import Forecast


class PolicyCalls:
    """The policy hand-offs of a `BlockManager`."""

    def apply(self, forecast: Forecast) -> None:
        """Hand a session's forecast to the policy (LRU ignores it)."""
        self._policy.apply(forecast, self)

    def session_moved(self, session: str) -> None:
        """Tell the policy `session` is now served elsewhere (LRU ignores it)."""
        self._policy.on_session_moved(session, self._clock())

    def set_static_shares(self, shares: Mapping[str, float] | None) -> bool:
        """Fix the tenants' HOT reservations (fractions of the tier; None: from demand);
        whether the policy has reservations to fix (only the predictive one)."""
        setter = getattr(self._policy, "set_static_shares", None)
        if setter is None:
            return False
        setter(shares)
        return True

    def reservations(self) -> dict[str, float]:
        """Each tenant's guaranteed HOT blocks under the policy's last plan (none: {})."""
        reservations = getattr(self._policy, "reservations", None)
        return reservations() if reservations is not None else {}

    def tick(self, now: float | None = None) -> None:
        """Let the policy act on time passing (TTL expiries, due prefetches)."""
        self._policy.tick(self._clock() if now is None else now, self)

    def take_events(self) -> list[CacheEvent]:
        """Drain the event queue, oldest first."""
        return self._residency.take_events()
