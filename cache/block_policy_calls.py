"""What a block manager hands to its eviction policy (forecasts, moved sessions, time,
fixed reservations), what it reads back for its worker's stats (reservations, pins,
prefetches), and its event queue.

`PolicyCalls` is a part of `cache.block_manager.BlockManager` (its base class), kept apart
so that each file holds one concept; it uses the manager's `_policy`, `_clock` and
`_residency`. Invariant: a policy without a hook (LRU has no forecasts or reservations)
is left as it is, and the call says so where the caller needs to know. The reads build
their dicts when asked (a worker's stats request), never on the serving path.
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

    def action_counts(self) -> dict[str, int]:
        """The policy's pins and prefetches since it started, by stats field (only those it
        has: LRU {}): `num_pins_set`, `num_pins_refused` (over the tenant's pin cap),
        `num_pins_declined` (TTL chose not to pin), and, in blocks, `num_prefetches`
        (copied HOST -> HOT ahead of a return), `num_prefetches_used` (hit in HOT
        before leaving it), `num_prefetches_wasted` (left HOT unused); invariant:
        num_prefetches == num_prefetches_used + num_prefetches_wasted + those pending."""
        counts: dict[str, int] = {}
        pin_counts = getattr(self._policy, "pin_counts", None)
        if pin_counts is not None:
            pins = pin_counts()
            for name, number in (("num_pins_set", pins.num_set), ("num_pins_refused", pins.num_refused),
                                 ("num_pins_declined", pins.num_declined)):
                if number is not None:
                    counts[name] = number
        prefetch_counts = getattr(self._policy, "prefetch_counts", None)
        if prefetch_counts is not None:
            prefetches = prefetch_counts()
            counts.update(num_prefetches=prefetches.num_prefetched, num_prefetches_used=prefetches.num_used,
                          num_prefetches_wasted=prefetches.num_wasted)
        return counts

    def pinned_blocks(self) -> dict[str, int] | None:
        """Each tenant's blocks under live pins now ({}: none; None: the policy never pins)."""
        pinned_blocks = getattr(self._policy, "pinned_blocks", None)
        return pinned_blocks() if pinned_blocks is not None else None

    def forecast_verdicts(self) -> dict[str, bool] | None:
        """Per tenant whose forecasts were scored enough: whether the policy still follows
        them (`PredictivePolicy.forecast_verdicts`); None: the policy never scores them."""
        verdicts = getattr(self._policy, "forecast_verdicts", None)
        return verdicts() if verdicts is not None else None

    def tick(self, now: float | None = None) -> None:
        """Let the policy act on time passing (TTL expiries, due prefetches)."""
        self._policy.tick(self._clock() if now is None else now, self)

    def take_events(self) -> list[CacheEvent]:
        """Drain the event queue, oldest first."""
        return self._residency.take_events()
