"""Continuum-style TTL pinning: the anchor for "keep a session's KV across its tool call".

LRU everywhere, except that when a response ends in a tool call the session's HOT blocks
are pinned for a time-to-live chosen from the tool's duration distribution, then freed to
LRU as the most recently released blocks (as an engine frees a request's blocks). A pinned
block is not evicted while any unpinned block can go; when only pinned blocks are left
(the engine needs the room for running requests), the pin that expires first yields,
deepest block first. The session's return ends its pin.

TTL (`choose_ttl_s`): with F the forecast's return-time distribution (P(returned by t)),
pinning n blocks for tau saves n blocks of prefill with probability F(tau) and holds them
for E[min(T, tau)] seconds. Memory is priced by the LRU's own turnover: a block held for
T_c seconds (the idle age at which LRU victims leave, measured) costs about one block
refill elsewhere. So tau* maximises F(tau) - E[min(T, tau)] / T_c over the forecast's
quantile points, and the session is pinned only when that is positive (Continuum's
selective pinning); while nothing has been evicted memory costs nothing and the pin lasts
to the last quantile. A tool without history gets `cold_ttl_s`. Everything is capped at
`max_ttl_s`.

Options (`make_policy("ttl", ...)`, checked here as option_checks.py says): `cold_ttl_s`
a finite number >= 0 (0: a tool without history is not pinned; unset: 5 s, or
`max_ttl_s` when that is less), `max_ttl_s` one > 0 (a cap of 0 or below would decline
every pin of a tool with history: LRU by another name), and `cold_ttl_s` at most
`max_ttl_s` (the cap is every pin's, a cold tool's too).

The turnover is the idle age of the unpinned HOT blocks this policy chose as victims
when they leave (a block dropped by a cache clear, or named but kept, is not counted).

Invariants: per tier, `_lru` holds exactly the evictable blocks that are not pinned,
least recently released first; `_pinned` holds the evictable HOT blocks of live pins;
`_owned[s]` the evictable HOT blocks whose most recent session was `s` when they were
filed (`_owner` maps back); `_pins[s]` is the
live deadline of `s` and `_deadlines` has an entry for it (stale ones skipped).
"""
from __future__ import annotations

import heapq
import math
from collections import OrderedDict

from cache.block_meta import BlockMeta
from cache.forecast import Forecast
from cache.policies.option_checks import NON_NEGATIVE, POSITIVE, check_not_above, check_option
from cache.policies.pins import PinCounts
from cache.policy import CacheActions, EvictionPolicy
from cache.tiers import Tier

VICTIM_AGE_ALPHA = 0.05
DEFAULT_COLD_TTL_S = 5.0   # a tool without history, unless the cap is less


def choose_ttl_s(forecast: Forecast, turnover_s: float) -> float:
    """The pin's time-to-live in seconds after `forecast.made_at_s` (0: do not pin)."""
    points = forecast.eta_quantiles_s
    if not points:
        return 0.0
    p_return = 1.0 - forecast.p_end
    best_tau, best_utility = 0.0, 0.0
    held_s = 0.0  # E[min(T, tau)] = integral of P(T > t) from 0 to tau
    prev_t, prev_f = 0.0, 0.0
    for quantile, t in points:
        f = p_return * quantile
        if t > prev_t:
            held_s += (t - prev_t) * (1.0 - 0.5 * (prev_f + f))
        utility = f - (held_s / turnover_s if math.isfinite(turnover_s) else 0.0)
        if utility > best_utility + 1e-12:
            best_tau, best_utility = t, utility
        prev_t, prev_f = max(prev_t, t), f
    return best_tau


class TTLPinPolicy(EvictionPolicy):
    """LRU with time-to-live pins across tool calls (see the module docstring)."""

    def __init__(self, *, cold_ttl_s: float | None = None, max_ttl_s: float = 600.0) -> None:
        check_option("max_ttl_s", max_ttl_s, POSITIVE)
        if cold_ttl_s is None:   # unset: the default, within a cap set below it
            cold_ttl_s = min(DEFAULT_COLD_TTL_S, max_ttl_s)
        check_option("cold_ttl_s", cold_ttl_s, NON_NEGATIVE)
        check_not_above("cold_ttl_s", cold_ttl_s, "max_ttl_s", max_ttl_s, "every pin is capped there")
        self.cold_ttl_s = cold_ttl_s
        self.max_ttl_s = max_ttl_s
        self._lru: dict[Tier, OrderedDict[int, BlockMeta]] = {tier: OrderedDict() for tier in Tier}
        self._pinned: dict[int, BlockMeta] = {}
        self._owned: dict[str, dict[BlockMeta, None]] = {}  # dicts, not sets: a fixed order
        self._owner: dict[BlockMeta, str] = {}
        self._pins: dict[str, float] = {}
        self._deadlines: list[tuple[float, str]] = []
        self.turnover_s = math.inf
        self._victim_id: int | None = None  # the HOT block choose_victim last named
        self._now_s = -math.inf
        self.num_pins = 0
        self.num_declined = 0

    # ---- hooks -------------------------------------------------------------------------

    def on_insert(self, block: BlockMeta, now_s: float) -> None:
        self._now_s = max(self._now_s, now_s)
        if block.ref_count == 0:
            self._file(block, now_s)

    def on_access(self, block: BlockMeta, session: str | None, now_s: float) -> None:
        self._unfile(block)
        if session is not None and session in self._pins:
            self._unpin(session)

    def on_release(self, block: BlockMeta, now_s: float) -> None:
        self._now_s = max(self._now_s, now_s)
        self._file(block, now_s)

    def on_remove(self, block: BlockMeta) -> None:
        is_victim = block.tier is Tier.HOT and block.id == self._victim_id
        if is_victim:
            self._victim_id = None
        if is_victim and block.id in self._lru[Tier.HOT]:
            # the unpinned HOT block this policy chose leaving (evicted or demoted); a
            # block dropped by a cache clear says nothing of the LRU's turnover
            age_s = max(0.0, self._now_s - block.last_access_s)
            turnover = self.turnover_s
            self.turnover_s = age_s if math.isinf(turnover) else (
                (1.0 - VICTIM_AGE_ALPHA) * turnover + VICTIM_AGE_ALPHA * age_s)
        self._unfile(block)

    def choose_victim(self, tier: Tier, now_s: float, tenant: str | None = None) -> int | None:
        self._now_s = max(self._now_s, now_s)
        self._expire(now_s)
        lru = self._lru[tier]
        if lru:
            victim = next(iter(lru))
            if tier is Tier.HOT:
                self._victim_id = victim
            return victim
        if tier is Tier.HOST or not self._pinned:
            return None
        for until_s, session in sorted(self._deadlines):
            if self._pins.get(session) != until_s:
                continue  # a stale entry: that pin ended or was renewed
            owned = [b for b in self._owned.get(session, ()) if b.id in self._pinned]
            if owned:
                return max(owned, key=lambda b: b.position).id
        return next(iter(self._pinned))

    def apply(self, forecast: Forecast, actions: CacheActions) -> None:
        if not forecast.waits_on_tool():
            return
        if forecast.eta_quantiles_s:
            ttl_s = min(choose_ttl_s(forecast, self.turnover_s), self.max_ttl_s)
        else:
            ttl_s = self.cold_ttl_s
        if ttl_s <= 0.0:
            self.num_declined += 1
            return
        session = forecast.session
        until_s = forecast.made_at_s + ttl_s
        self._pins[session] = until_s
        heapq.heappush(self._deadlines, (until_s, session))
        self.num_pins += 1
        for block in list(self._owned.get(session, ())):
            if self._lru[Tier.HOT].pop(block.id, None) is not None:
                self._pinned[block.id] = block

    def tick(self, now_s: float, actions: CacheActions) -> None:
        self._expire(now_s)

    def is_pinned(self, session: str, now_s: float) -> bool:
        until_s = self._pins.get(session)
        return until_s is not None and until_s > now_s

    def pin_counts(self) -> PinCounts:
        """Pins set (a renewal counts again) and declined (`choose_ttl_s` said 0) since
        start; nothing is refused (no per-tenant cap)."""
        return PinCounts(self.num_pins, num_declined=self.num_declined)

    def pinned_blocks(self) -> dict[str, int]:
        """Each tenant's evictable HOT blocks held by live pins (as of the last expiry
        check), counted here: O(pinned blocks), for stats requests, not the hot path."""
        counts: dict[str, int] = {}
        for block in self._pinned.values():
            counts[block.tenant] = counts.get(block.tenant, 0) + 1
        return counts

    # ---- internals ---------------------------------------------------------------------

    def _file(self, block: BlockMeta, now_s: float) -> None:
        owner = next(reversed(block.sessions)) if block.sessions else None
        if block.tier is Tier.HOT and owner is not None:
            self._owned.setdefault(owner, {})[block] = None
            self._owner[block] = owner
            if self.is_pinned(owner, now_s):
                self._pinned[block.id] = block
                return
        lru = self._lru[block.tier]
        lru[block.id] = block
        lru.move_to_end(block.id)

    def _unfile(self, block: BlockMeta) -> None:
        if self._lru[block.tier].pop(block.id, None) is None and block.tier is Tier.HOT:
            self._pinned.pop(block.id, None)
        owner = self._owner.pop(block, None)
        if owner is not None:
            owned = self._owned[owner]
            owned.pop(block, None)
            if not owned:
                del self._owned[owner]

    def _unpin(self, session: str) -> None:
        """End `session`'s pin: its blocks become the most recently released."""
        self._pins.pop(session, None)
        lru = self._lru[Tier.HOT]
        for block in sorted(self._owned.get(session, ()), key=lambda b: -b.position):
            if self._pinned.pop(block.id, None) is not None:
                lru[block.id] = block
                lru.move_to_end(block.id)

    def _expire(self, now_s: float) -> None:
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now_s:
            until_s, session = heapq.heappop(deadlines)
            if self._pins.get(session) == until_s:
                self._unpin(session)
