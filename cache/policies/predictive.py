"""The forecast-driven policy: value-ordered eviction, TTL pins, demote/prefetch, shares.

Value (valuation.py). A block is worth keeping in proportion to how soon and how surely
it is needed again per second of memory it holds: by default the hit density of the
sessions using it (P(return within H) / expected time held), conditioned on the time
they have already waited; H scales with the measured lifetime of a block in each tier.
Sessions without a trusted forecast (cold model, recent Brier score worse than the base
rate's, no forecast at all) decay by idle time: LRU order.

Eviction takes the lowest-valued group (groups.py), deepest block first. In HOT, tenants
holding more than their reservation are taken from first (reservations.py; re-planned
every `replan_interval_s` from each tenant's forecast demand), then the tenant asking
for room, then anyone.

Pins (pins.py, predictive_waits.py). A forecast whose next step is a tool call pins the
session's HOT blocks until the `pin_quantile` of its return time: until then they keep
at least their value at the start of the call, so they outlast lower-valued blocks
(LRU-handled ones, ended sessions) even when the tool runs late, yet yield to
higher-valued ones; a tenant's pinned blocks are capped.

Tiers. A HOT victim moves to a full HOST only when its value there beats HOST's
cheapest block's, both valued now and from their blocks' last use (a demotion is no
use), else it is dropped: without trusted forecasts, LRU's choice. A running request's
block written through to a full HOST is admitted by that rule once its session's
forecast has come, before that by last use, as under LRU (it wins). A session with
blocks in HOST is prefetched back from its `prefetch_quantile` return time minus the
copy time, once it likely returns within HOT's horizon and outranks HOT's cheapest
block `prefetch_margin` times over; prefetches are counted used or wasted (prefetch.py).

Moves. When the router sends a session to another worker (`on_session_moved`), its pin
and prefetch end and it adds nothing to its blocks' value here until it comes back.

Invariants: see groups.py for the index; every hook is O(log n) amortised; values are
recomputed lazily (at most once per `refresh_fraction` of a forecast's age); `apply` and
`tick` are the only places that call the manager, never while iterating own state.
"""
from __future__ import annotations

import heapq
from collections.abc import Mapping

from cache.block_meta import BlockMeta
from cache.forecast import Forecast
from cache.policies.groups import BlockGroup, GroupIndex
from cache.policies.pins import PinBook
from cache.policies.predictive_config import PredictiveConfig
from cache.policies.predictive_prefetch import PrefetchPlanning
from cache.policies.predictive_trust import ForecastTrust, TenantState
from cache.policies.predictive_upkeep import PolicyUpkeep
from cache.policies.predictive_waits import SessionWaits
from cache.policies.prefetch import PrefetchCounts, PrefetchTracker
from cache.policies.reservations import ReservationPlan
from cache.policies.return_curve import ReturnCurve
from cache.policies.valuation import SessionState, Valuation
from cache.policy import CacheActions, EvictionPolicy
from cache.tiers import Tier

MAX_FRESHEN = 8   # stale tops re-ranked to find HOST's cheapest group's value now


class PredictivePolicy(ForecastTrust, PolicyUpkeep, PrefetchPlanning, SessionWaits, EvictionPolicy):
    """Forecast-driven eviction and placement (see the module docstring). Its upkeep
    over time and choice of victim group live in predictive_upkeep.py, its prefetch in
    predictive_prefetch.py, its pins and the end of a session's wait in
    predictive_waits.py, whose forecasts it follows in predictive_trust.py (mixins over
    this class's state).

    Invariants: the group index holds exactly the evictable blocks the manager showed
    it; `_tenants[t].num_hot` counts `t`'s cached HOT blocks; a session's `curve` is
    only ever a forecast made at or after its last request; one `_resolve` entry per
    forecast scores it once (returned in time, or not).
    """

    def __init__(self, config: PredictiveConfig | None = None) -> None:
        self.config = config or PredictiveConfig()
        cfg = self.config
        self._index = GroupIndex()
        self._sessions: dict[str, SessionState] = {}
        self._tenants: dict[str, TenantState] = {}
        self._pins = PinBook()
        self._plan = ReservationPlan(cfg.reserve_frac, cfg.equal_frac,
                                     dict(cfg.static_shares) if cfg.static_shares is not None else None)
        self._prefetch = PrefetchTracker()
        self._resolve: list[tuple[float, str]] = []
        self._valuation = Valuation(cfg, self._sessions, self.is_trusted, self.is_session_trusted)
        self._room = self._valuation.room
        self._replanned_at_s: float | None = None
        self._now_s = 0.0

    # ---- read access -----------------------------------------------------------------

    def prefetch_counts(self) -> PrefetchCounts:
        return self._prefetch.snapshot()

    def horizon_s(self, tier: Tier) -> float:
        """How far ahead a block of `tier` is valued (valuation.py)."""
        return self._valuation.horizon_s(tier)

    def is_pinned(self, session: str, now_s: float) -> bool:
        return self._pins.is_pinned(session, now_s)

    def reserved_blocks(self, tenant: str) -> float:
        return self._plan.reserved(tenant)

    def reservations(self) -> dict[str, float]:
        return self._plan.reservations

    def protects(self, tenant: str, tier: Tier) -> bool:
        state = self._tenants.get(tenant)
        return (tier is Tier.HOT and self._plan.is_active and state is not None
                and not self._plan.is_over(tenant, state.num_hot))

    def set_static_shares(self, shares: Mapping[str, float] | None) -> None:
        """Fix (or, with None, free) the tenants' HOT reservations; re-planned at the next
        tick, without waiting for `replan_interval_s`. (`config.static_shares` stays what
        the policy was built with.)"""
        self._plan.set_static_shares(shares)
        self._replanned_at_s = None

    # ---- hooks -------------------------------------------------------------------------

    def on_insert(self, block: BlockMeta, now_s: float) -> None:
        self._now_s = max(self._now_s, now_s)
        tiers = self._room
        tiers.num_cached[block.tier is Tier.HOST] += 1
        if block.num_hits == 0 and block.created_s == now_s:
            tiers.num_new += 1
        if block.tier is Tier.HOT:
            self._tenant(block.tenant).num_hot += 1
        if block.ref_count:
            if block.sessions:
                self._returned(next(reversed(block.sessions)), block.tenant, now_s)
        else:
            self._file(block, now_s)

    def on_access(self, block: BlockMeta, session: str | None, now_s: float) -> None:
        self._now_s = max(self._now_s, now_s)
        self._index.remove(block)
        if block.tier is Tier.HOT:
            self._prefetch.on_hot_access(block)
        if session is not None:
            self._returned(session, block.tenant, now_s)

    def on_release(self, block: BlockMeta, now_s: float) -> None:
        self._now_s = max(self._now_s, now_s)
        self._file(block, now_s)

    def on_remove(self, block: BlockMeta) -> None:
        self._index.remove(block)
        self._room.num_cached[block.tier is Tier.HOST] -= 1
        if block.tier is Tier.HOT:
            self._tenants[block.tenant].num_hot -= 1
            self._prefetch.on_hot_remove(block)

    def on_full(self, tier: Tier, now_s: float) -> None:
        self._room.learn_capacity(tier)   # the tier's size, for horizons and reservations
        self._maintain(now_s)

    def choose_victim(self, tier: Tier, now_s: float, tenant: str | None = None) -> int | None:
        self.on_full(tier, now_s)
        found = self._lowest(tier, tenant)
        return None if found is None else GroupIndex.victim(found[1]).id

    def should_demote(self, block: BlockMeta, now_s: float) -> bool:
        """Demote when the victim, valued in HOST now, is worth more than HOST's cheapest
        group valued now too (a heap value may be stale); on a tie, when worth anything
        (both from their blocks' last use: the newer replaces the older, as under LRU).
        A block written through (asked before it is placed: `block.tier` is HOST) whose
        session has no trusted forecast yet (it follows the request) is compared by last
        use alone, as under LRU: its fallback value would lose to any trusted forecast."""
        self._room.learn_capacity(Tier.HOST)  # HOST is full when this is asked
        lowest = self._lowest_now(Tier.HOST, now_s)
        if lowest is None:
            return True
        sessions = tuple(block.sessions)
        if block.tier is Tier.HOST and not self._valuation.is_forecast(sessions):
            return block.last_access_s >= lowest[1].last_use_s
        value = self._value_of(block.tenant, sessions, Tier.HOST, now_s, block.last_access_s, block.sessions)
        return value > lowest[0] or value == lowest[0] > 0.0

    # ---- forecasts and time ------------------------------------------------------------

    def apply(self, forecast: Forecast, actions: CacheActions) -> None:
        now = max(self._now_s, forecast.made_at_s)
        self._maintain(now)
        name, tenant = forecast.session, forecast.tenant
        session = self._session(name, tenant, now)
        if forecast.made_at_s < session.last_use_s - 1e-9:
            return  # made before the session's latest request: stale
        self._tenant(tenant).is_confident = forecast.confident
        session.is_confident = forecast.confident
        curve = ReturnCurve.from_forecast(forecast)
        session.curve = curve
        self._valuation.forget()
        cfg = self.config
        hot_group = self._index.group(Tier.HOT, tenant, name)
        if curve is not None:
            soon_s = forecast.eta_s(cfg.prefetch_quantile)
            late_s = forecast.eta_s(cfg.prefetch_until_quantile)
            session.return_soon_s = None if soon_s is None else forecast.made_at_s + soon_s
            session.return_late_s = None if late_s is None else forecast.made_at_s + late_s
            if session.predicted_p is None:
                horizon = self.horizon_s(Tier.HOT)
                session.predicted_p = curve.p_by(horizon)
                session.predicted_until_s = forecast.made_at_s + horizon
                heapq.heappush(self._resolve, (session.predicted_until_s, name))
            if self.is_session_trusted(session) and forecast.waits_on_tool():
                self._pin(name, tenant, forecast, hot_group, now)
        for group in (hot_group, self._index.group(Tier.HOST, tenant, name)):
            if group is not None:
                self._rank(group, now)
        host_group = self._index.group(Tier.HOST, tenant, name)
        if host_group is not None:
            self._schedule_prefetch(name, session, len(host_group.blocks), now)

    def on_session_moved(self, session: str, now_s: float) -> None:
        """The session is served elsewhere now: its pin, prefetch and pending outcome
        go, and its blocks keep only the value other sessions give them."""
        state = self._sessions.get(session)
        if state is None or state.moved:
            return
        now = max(self._now_s, now_s)
        self._maintain(now)
        state.moved = True
        state.predicted_p = None  # its return here is no longer a test of the forecast
        self._end_wait(session, state)
        for tier in (Tier.HOT, Tier.HOST):
            group = self._index.group(tier, state.tenant, session)
            if group is not None:
                self._rank(group, now)

    def tick(self, now_s: float, actions: CacheActions) -> None:
        self._maintain(now_s)
        for name in self._prefetch.pop_due(now_s):
            self._prefetch_now(name, now_s, actions)

    # ---- internals: sessions -----------------------------------------------------------

    def _tenant(self, tenant: str) -> TenantState:
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = TenantState()
        return state

    def _session(self, name: str, tenant: str, now_s: float) -> SessionState:
        session = self._sessions.get(name)
        if session is None:
            session = self._sessions[name] = SessionState(tenant, now_s)
        return session

    # ---- internals: ranking ------------------------------------------------------------

    def _file(self, block: BlockMeta, now_s: float) -> None:
        group, is_new = self._index.add(block, now_s)
        if is_new:
            self._rank(group, now_s)
        if block.tier is Tier.HOST and group.sessions:
            name = group.sessions[-1]
            session = self._sessions.get(name)
            if session is not None and session.return_soon_s is not None and not self._prefetch.is_scheduled(name):
                self._schedule_prefetch(name, session, len(group.blocks), now_s)

    def _lowest_now(self, tier: Tier, now_s: float) -> tuple[float, BlockGroup] | None:
        """The cheapest group of `tier` with its value at `now_s`: a top ranked earlier is
        re-ranked, until the top is current (at most `MAX_FRESHEN` times; values mostly
        fall with time, so the first re-ranked top usually stays the top)."""
        found = self._lowest(tier, None)
        for _ in range(MAX_FRESHEN):
            if found is None or found[1].ranked_s == now_s:
                return found
            self._rank(found[1], now_s)
            found = self._lowest(tier, None)
        if found is not None and found[1].ranked_s != now_s:
            self._rank(found[1], now_s)
            found = found[1].value, found[1]
        return found

    def _rank(self, group: BlockGroup, now_s: float) -> None:
        cfg = self.config
        last_uses = next(iter(group.blocks)).sessions if len(group.sessions) > 1 else None
        value = self._value_of(group.tenant, group.sessions, group.tier, now_s, group.last_use_s, last_uses)
        pin_until = None
        if group.tier is Tier.HOT:
            for name in group.sessions:
                pin = self._pins.get(name)
                if pin is not None and pin.until_s > now_s:
                    value = max(value, pin.floor)
                    pin_until = pin.until_s if pin_until is None else max(pin_until, pin.until_s)
        age_s = now_s - group.last_added_s
        if group.sessions:
            session = self._sessions.get(group.sessions[-1])
            if session is not None:
                age_s = now_s - (session.curve.made_at_s if session.curve is not None else session.last_use_s)
        due_s = now_s + max(cfg.min_refresh_s, cfg.refresh_fraction * age_s)
        if pin_until is not None:
            due_s = min(due_s, pin_until)
        self._index.rank(group, value, due_s, is_pinned=pin_until is not None, ranked_s=now_s)

    def _value_of(self, tenant: str, sessions: tuple[str, ...], tier: Tier, now_s: float, last_s: float,
                  last_uses: Mapping[str, float] | None = None) -> float:
        return self._valuation.value_of(tenant, sessions, tier, now_s, last_s, last_uses)

