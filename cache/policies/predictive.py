"""The forecast-driven policy: value-ordered eviction, TTL pins, demote/prefetch, shares.

Value. A block is worth keeping in a tier in proportion to how likely it is to be needed
again soon, per unit of memory it holds. Every block holds `bytes_per_block` and saves
`block_size` tokens of prefill, so ordering by P × saved seconds ÷ bytes is ordering by
the probability term, which comes from the forecasts of the sessions using the block:
- `density` (default): expected returns per second held, P(return within H) divided by
  the expected time held until the return or H (the hit density of LHD), so a session
  due back in 20 s outranks one equally likely to be back within the horizon at 200 s;
- `within`: P(return within H) alone.
Both condition on the time already waited (a session overdue by its ETA fades). H is
`horizon_factor` × the time new blocks take to fill HOT (for HOT) or the whole cache (for
HOST), so HOST values later returns. A block several sessions share (a
tenant's system prompt) adds their rates (`within`: combines 1 - Π(1 - p)).
Sessions without a trusted forecast (cold model, recent Brier score worse than the base
rate, or no forecast at all) decay as `fallback_p` × exp(-idle / H): LRU order.

Eviction takes the lowest-valued group (groups.py), deepest block first. In HOT,
tenants holding more than their reservation are taken from first (reservations.py),
then the tenant asking for room, then anyone.

Pins. A forecast whose next step is a tool call pins the session's HOT blocks until the
`pin_quantile` of its return time (pins.py): until then they keep at least their value
at the start of the call, so they outlast lower-valued blocks (LRU-handled ones, ended
sessions) even when the tool runs late, yet yield to higher-valued ones; a tenant's
pinned blocks are capped.

Tiers. A HOT victim moves to HOST only when its value there beats HOST's cheapest block
(else it is dropped); a session with blocks in HOST is prefetched back at its
`prefetch_quantile` return time minus the copy time, if it outranks HOT's cheapest
block then; prefetches are counted used or wasted (prefetch.py).

Invariants: see groups.py for the index; every hook is O(log n) amortised; ranks are
recomputed lazily (at most once per `refresh_fraction` of a forecast's age); `apply` and
`tick` are the only places that call the manager, never while iterating own state.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from cache.block_meta import BlockMeta
from cache.forecast import END_SYMBOL, Forecast
from cache.policies.accuracy import TenantAccuracy
from cache.policies.groups import BlockGroup, GroupIndex
from cache.policies.pins import PinBook
from cache.policies.predictive_config import PredictiveConfig
from cache.policies.prefetch import PrefetchCounts, PrefetchTracker
from cache.policies.reservations import ReservationPlan
from cache.policies.return_curve import ReturnCurve
from cache.policy import CacheActions, EvictionPolicy
from cache.tiers import Tier

NON_TOOL_STEPS = frozenset({END_SYMBOL, "USER", "ASSISTANT_TEXT", "user", "start"})


@dataclass(slots=True)
class _Session:
    tenant: str
    last_use_s: float
    curve: ReturnCurve | None = None
    return_soon_s: float | None = None
    return_late_s: float | None = None
    has_prefetched: bool = False
    predicted_p: float | None = None
    predicted_until_s: float = 0.0


@dataclass(slots=True)
class _Tenant:
    num_hot: int = 0
    is_confident: bool = False
    accuracy: TenantAccuracy = field(default_factory=TenantAccuracy)


@dataclass(slots=True)
class _Tiers:
    """Sizes of the tiers and the rate at which new blocks arrive, for the horizons.

    Capacities are learned when a tier first asks for a victim (it is full then). Only
    NEW blocks count towards the rate: moves between tiers churn slots without adding
    anything to remember, so a block's lifetime in the cache is (room) / (new blocks).
    Lists are indexed by `tier is Tier.HOST` (NOTE: hashing an Enum member runs Python
    code, too slow for every hook).
    """

    capacity: list[int] = field(default_factory=lambda: [0, 0])
    num_cached: list[int] = field(default_factory=lambda: [0, 0])
    num_new: int = 0
    since_s: float | None = None
    new_per_s: float = 0.0


class PredictivePolicy(EvictionPolicy):
    def __init__(self, config: PredictiveConfig | None = None) -> None:
        self.config = config or PredictiveConfig()
        cfg = self.config
        self._index = GroupIndex()
        self._sessions: dict[str, _Session] = {}
        self._tenants: dict[str, _Tenant] = {}
        self._pins = PinBook()
        self._plan = ReservationPlan(cfg.reserve_frac, cfg.equal_frac,
                                     dict(cfg.static_shares) if cfg.static_shares is not None else None)
        self._prefetch = PrefetchTracker()
        self._resolve: list[tuple[float, str]] = []
        self._tiers = _Tiers()
        self._is_density = cfg.value == "density"
        self._now_s = 0.0
        self._memo: dict[tuple[str, bool], float] = {}
        self._memo_s = -math.inf

    # ---- read access -----------------------------------------------------------------

    def prefetch_counts(self) -> PrefetchCounts:
        counts = self._prefetch.counts
        return PrefetchCounts(counts.num_prefetched, counts.num_used, counts.num_wasted)

    def horizon_s(self, tier: Tier) -> float:
        """How far ahead a block of `tier` is valued: `horizon_factor` x the time the
        new blocks take to fill the tier (HOT) or the whole cache (HOST)."""
        tiers = self._tiers
        is_host = tier is Tier.HOST
        room = tiers.capacity[0] + (tiers.capacity[1] if is_host else 0)
        if tiers.capacity[is_host] == 0 or tiers.new_per_s <= 0.0:
            return self.config.default_horizon_s
        return max(self.config.min_horizon_s, self.config.horizon_factor * room / tiers.new_per_s)

    def is_trusted(self, tenant: str) -> bool:
        """Whether `tenant`'s forecasts drive its blocks (else they are ranked as LRU)."""
        state = self._tenants.get(tenant)
        if state is None or not state.is_confident:
            return False
        cfg = self.config
        return state.accuracy.is_accurate(cfg.accuracy_min_events, cfg.accuracy_margin) is not False

    def is_pinned(self, session: str, now_s: float) -> bool:
        return self._pins.is_pinned(session, now_s)

    def reserved_blocks(self, tenant: str) -> float:
        return self._plan.reserved(tenant)

    # ---- hooks -------------------------------------------------------------------------

    def on_insert(self, block: BlockMeta, now_s: float) -> None:
        self._now_s = max(self._now_s, now_s)
        tiers = self._tiers
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
        self._tiers.num_cached[block.tier is Tier.HOST] -= 1
        if block.tier is Tier.HOT:
            self._tenants[block.tenant].num_hot -= 1
            self._prefetch.on_hot_remove(block)

    def choose_victim(self, tier: Tier, now_s: float, tenant: str | None = None) -> int | None:
        tiers = self._tiers
        index = tier is Tier.HOST
        tiers.capacity[index] = max(tiers.capacity[index], tiers.num_cached[index])
        self._maintain(now_s)
        found = self._lowest(tier, tenant)
        return None if found is None else GroupIndex.victim(found[1]).id

    def should_demote(self, block: BlockMeta, now_s: float) -> bool:
        tiers = self._tiers
        tiers.capacity[1] = max(tiers.capacity[1], tiers.num_cached[1])  # HOST is full when asked
        lowest = self._lowest(Tier.HOST, None)
        if lowest is None:
            return True
        return self._value_of(block.tenant, tuple(block.sessions), Tier.HOST, now_s, block.last_access_s) > lowest[0]

    # ---- forecasts and time ------------------------------------------------------------

    def apply(self, forecast: Forecast, actions: CacheActions) -> None:
        now = max(self._now_s, forecast.made_at_s)
        self._maintain(now)
        name, tenant = forecast.session, forecast.tenant
        session = self._session(name, tenant, now)
        if forecast.made_at_s < session.last_use_s - 1e-9:
            return  # made before the session's latest request: stale
        self._tenant(tenant).is_confident = forecast.confident
        curve = ReturnCurve.from_forecast(forecast)
        session.curve = curve
        self._memo.clear()
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
            if self.is_trusted(tenant) and _waits_on_tool(forecast):
                self._pin(name, tenant, forecast, hot_group, now)
        for group in (hot_group, self._index.group(Tier.HOST, tenant, name)):
            if group is not None:
                self._rank(group, now)
        host_group = self._index.group(Tier.HOST, tenant, name)
        if host_group is not None:
            self._schedule_prefetch(name, session, len(host_group.blocks), now)

    def tick(self, now_s: float, actions: CacheActions) -> None:
        self._maintain(now_s)
        for name in self._prefetch.pop_due(now_s):
            self._prefetch_now(name, now_s, actions)

    # ---- internals: sessions -----------------------------------------------------------

    def _tenant(self, tenant: str) -> _Tenant:
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = _Tenant()
        return state

    def _session(self, name: str, tenant: str, now_s: float) -> _Session:
        session = self._sessions.get(name)
        if session is None:
            session = self._sessions[name] = _Session(tenant, now_s)
        return session

    def _returned(self, name: str, tenant: str, now_s: float) -> None:
        """A request of session `name` arrived: its wait (and pin, prefetch) is over."""
        session = self._sessions.get(name)
        if session is None:
            self._sessions[name] = _Session(tenant, now_s)
            return
        if session.last_use_s == now_s and session.curve is None:
            return
        if session.predicted_p is not None:
            returned = now_s <= session.predicted_until_s
            self._tenant(tenant).accuracy.add(session.predicted_p, returned, self.config.accuracy_alpha)
            session.predicted_p = None
        session.curve = None
        self._memo.clear()
        session.return_soon_s = None
        session.return_late_s = None
        session.has_prefetched = False
        session.last_use_s = now_s
        self._pins.unpin(name)
        self._prefetch.cancel(name)

    def _pin(self, name: str, tenant: str, forecast: Forecast, group: BlockGroup | None, now_s: float) -> None:
        cfg = self.config
        ttl_s = forecast.eta_s(cfg.pin_quantile)
        if ttl_s is None or group is None:
            return
        until_s = forecast.made_at_s + min(ttl_s, cfg.max_pin_s)
        if until_s <= now_s:
            return
        if self._plan.is_active:
            cap = cfg.pin_cap_frac * self._plan.reserved(tenant)
        else:
            cap = cfg.pin_cap_frac * (self._tiers.capacity[0] or math.inf)
        floor = self._value_of(tenant, (name,), Tier.HOT, now_s, now_s)
        self._pins.pin(name, tenant, until_s, len(group.blocks), cap, floor)

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

    def _rank(self, group: BlockGroup, now_s: float) -> None:
        cfg = self.config
        value = self._value_of(group.tenant, group.sessions, group.tier, now_s, group.last_added_s)
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
        self._index.rank(group, value, due_s, is_pinned=pin_until is not None)

    def _value_of(self, tenant: str, sessions: tuple[str, ...], tier: Tier, now_s: float, last_s: float) -> float:
        """Value of blocks of `tier` used by `sessions` (`last_s`: their last use, for
        blocks no session claims)."""
        horizon = self.horizon_s(tier)
        if not sessions:
            return self._fallback(now_s - last_s, horizon)
        if now_s != self._memo_s:
            self._memo.clear()
            self._memo_s = now_s
        memo = self._memo
        is_host = tier is Tier.HOST
        trusted = self.is_trusted(tenant)
        total = 0.0
        miss = 1.0
        for name in sessions:
            value = memo.get((name, is_host))
            if value is None:
                session = self._sessions.get(name)
                curve = None if session is None else session.curve
                if curve is not None and trusted:
                    if self._is_density:
                        value = curve.hit_density(now_s, horizon)
                    else:
                        value = curve.p_within(now_s, horizon)
                    memo[(name, is_host)] = value
                else:
                    idle_s = now_s - (last_s if session is None else session.last_use_s)
                    value = self._fallback(idle_s, horizon)
            total += value
            miss *= 1.0 - min(value, 1.0)
        return total if self._is_density else 1.0 - miss

    def _fallback(self, idle_s: float, horizon_s: float) -> float:
        p = self.config.fallback_p * math.exp(-max(0.0, idle_s) / horizon_s)
        return p / horizon_s if self._is_density else p

    def _lowest(self, tier: Tier, requester: str | None) -> tuple[float, BlockGroup] | None:
        """The lowest-valued group to take from, honouring HOT reservations."""
        index = self._index
        tenants = index.tenants(tier)
        if tier is Tier.HOT and self._plan.is_active:
            best = None
            for tenant in tenants:
                if self._plan.is_over(tenant, self._tenants[tenant].num_hot):
                    top = index.top(tier, tenant)
                    if top is not None and (best is None or top[0] < best[0]):
                        best = top
            if best is not None:
                return best
            if requester is not None:
                own = index.top(tier, requester)
                if own is not None:
                    return own
        best = None
        for tenant in tenants:
            top = index.top(tier, tenant)
            if top is not None and (best is None or top[0] < best[0]):
                best = top
        return best

    # ---- internals: time ---------------------------------------------------------------

    def _maintain(self, now_s: float) -> None:
        """Due bookkeeping that never calls the manager: rates, pins, outcomes, ranks,
        the reservation plan."""
        self._now_s = max(self._now_s, now_s)
        half_life = self.config.rate_half_life_s
        tiers = self._tiers
        if tiers.since_s is None:
            tiers.since_s = now_s
        elif now_s - tiers.since_s >= 0.1 * half_life:
            elapsed = now_s - tiers.since_s
            weight = 1.0 - 0.5 ** (elapsed / half_life)
            tiers.new_per_s += weight * (tiers.num_new / elapsed - tiers.new_per_s)
            tiers.num_new = 0
            tiers.since_s = now_s
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
        plan = self._plan
        if plan.planned_at_s is None or now_s - plan.planned_at_s >= self.config.replan_interval_s:
            self._replan(now_s)

    def _replan(self, now_s: float) -> None:
        """Re-plan reservations from forecast demand; forget long-idle sessions."""
        demands: dict[str, float] = {}
        horizon = self.horizon_s(Tier.HOT)
        for group in self._index.groups():
            p = 0.0
            for name in group.sessions:
                session = self._sessions.get(name)
                if session is not None and session.curve is not None and self.is_trusted(group.tenant):
                    p = max(p, session.curve.p_within(now_s, horizon))
                elif session is not None:
                    p = max(p, self.config.fallback_p * math.exp(-(now_s - session.last_use_s) / horizon))
            demands[group.tenant] = demands.get(group.tenant, 0.0) + p * len(group.blocks)
        for tenant, state in self._tenants.items():
            if state.num_hot > 0:
                demands[tenant] = demands.get(tenant, 0.0) + 1.0
        capacity = self._tiers.capacity[0]
        if capacity:
            self._plan.plan(capacity, demands, now_s)
        cutoff = now_s - self.config.session_idle_forget_s
        stale = [name for name, session in self._sessions.items()
                 if session.last_use_s < cutoff and (session.curve is None or session.curve.made_at_s < cutoff)
                 and not self._pins.is_pinned(name, now_s)]
        for name in stale:
            del self._sessions[name]

    # ---- internals: prefetch ---------------------------------------------------------

    def _schedule_prefetch(self, name: str, session: _Session, num_blocks: int, now_s: float) -> None:
        if (not self.config.prefetch or session.return_soon_s is None or session.has_prefetched
                or not self.is_trusted(session.tenant)):
            return
        due_s = session.return_soon_s - num_blocks * self.config.host_to_hot_s_per_block
        self._prefetch.schedule(name, max(due_s, now_s))

    def _prefetch_now(self, name: str, now_s: float, actions: CacheActions) -> None:
        """Copy a waiting session's HOST chain back to HOT, head first, once it likely
        returns within HOT's horizon and while it outranks HOT's cheapest block; too
        early, look again later (until the late return-time quantile)."""
        session = self._sessions.get(name)
        if session is None or session.curve is None or session.has_prefetched:
            return
        group = self._index.group(Tier.HOST, session.tenant, name)
        if group is None:
            return
        cfg = self.config
        if session.curve.p_within(now_s, self.horizon_s(Tier.HOT)) < cfg.prefetch_min_p:
            retry_s = now_s + max(cfg.min_refresh_s, cfg.refresh_fraction * (now_s - session.curve.made_at_s))
            if session.return_late_s is not None and retry_s <= session.return_late_s:
                self._prefetch.schedule(name, retry_s)
            return
        chain: list[BlockMeta] = []
        block: BlockMeta | None = GroupIndex.victim(group)
        while block is not None:
            if block.tier is Tier.HOST:
                chain.append(block)
            if block.parent_hash is None:
                break
            parent = actions.find(block.parent_hash)
            if parent is None or parent.uid != block.parent_uid:
                return  # a missing ancestor: the chain cannot hit, copying it back is waste
            block = parent
        value = self._value_of(session.tenant, (name,), Tier.HOT, now_s, session.last_use_s)
        for block in reversed(chain):
            if not block.is_cached or block.tier is not Tier.HOST or block.ref_count:
                break
            if actions.num_free_blocks(Tier.HOT) == 0:
                lowest = self._lowest(Tier.HOT, session.tenant)
                if lowest is None or cfg.prefetch_margin * lowest[0] >= value:
                    break
            if actions.promote(block.id) is None:
                break
            self._prefetch.mark(block)
            session.has_prefetched = True  # once per wait: a chain demoted again is not chased


def _waits_on_tool(forecast: Forecast) -> bool:
    """Whether the session most likely waits on a tool call (not a user, not the end)."""
    p_tool = sum(p for step, p in forecast.next_step.items() if step not in NON_TOOL_STEPS)
    return p_tool >= 0.5
