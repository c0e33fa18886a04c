"""What a block is worth to the predictive policy, per second of memory it holds.

Every block holds `bytes_per_block` and saves `block_size` tokens of prefill, so ordering
by P(needed) × saved seconds ÷ bytes is ordering by the probability term, which comes
from the forecasts of the sessions using the block:
- `density` (default): expected returns per second held, P(return within H) over the
  expected time held until the return or H (the hit density of LHD), so a session due
  back in 20 s outranks one equally likely to be back within the horizon at 200 s;
  plus `long_weight` times the same over `long_horizon_factor` x H, which orders the
  sessions due back only after H (sooner first) instead of leaving them tied at 0;
- `within`: P(return within H) alone.
Both condition on the time already waited, so a session overdue by its ETA fades. A
block several sessions share adds their rates (`within`: 1 - Π(1 - p)). Sessions
without a trusted forecast decay as `fallback_p` × exp(-idle / H), idle since the later of
their last request and their blocks' release: LRU order. Trust is
per session (its forecast said it is confident, and its tenant's recent forecasts were
not worse than the base rate); the sharing rate (sessions per second that came to a
block, over the span of its recorded uses or, when higher, weighted to the last H)
counts for trusted tenants only.

The horizon H is `horizon_factor` × the time new blocks take to fill HOT (for HOT) or
the whole cache (for HOST): a block's expected lifetime, measured, not configured.

Invariant: values are memoised per (session, tier) for one instant only; `forget`
drops them whenever a session's forecast or trust changes.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cache.policies.predictive_config import PredictiveConfig
from cache.policies.return_curve import ReturnCurve
from cache.tiers import Tier


@dataclass(slots=True)
class SessionState:
    """What the policy knows of one session: its last request and current forecast.

    `curve` is None while no forecast made after `last_use_s` has arrived; `moved`
    sessions add nothing to a block's value until they return.
    """

    tenant: str
    last_use_s: float
    curve: ReturnCurve | None = None
    return_soon_s: float | None = None
    return_late_s: float | None = None
    has_prefetched: bool = False
    predicted_p: float | None = None
    predicted_until_s: float = 0.0
    moved: bool = False  # served by another cache since its last request here: worth 0
    is_confident: bool = False  # what its current forecast said of itself


@dataclass(slots=True)
class TierRoom:
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

    def learn_capacity(self, tier: Tier) -> None:
        """`tier` is full now: its cached blocks are (about) its capacity."""
        index = tier is Tier.HOST
        self.capacity[index] = max(self.capacity[index], self.num_cached[index])

    def update_rate(self, now_s: float, half_life_s: float) -> None:
        """Fold the new blocks counted since the last update into the smoothed rate
        (at most every tenth of a half-life)."""
        if self.since_s is None:
            self.since_s = now_s
        elif now_s - self.since_s >= 0.1 * half_life_s:
            elapsed = now_s - self.since_s
            weight = 1.0 - 0.5 ** (elapsed / half_life_s)
            self.new_per_s += weight * (self.num_new / elapsed - self.new_per_s)
            self.num_new = 0
            self.since_s = now_s


class Valuation:
    """Values of sessions' blocks in each tier, from their forecasts."""

    def __init__(self, config: PredictiveConfig, sessions: dict[str, SessionState],
                 is_trusted: Callable[[str], bool], is_session_trusted: Callable[[SessionState], bool]) -> None:
        self.config = config
        self.room = TierRoom()
        self._sessions = sessions
        self._is_trusted = is_trusted
        self._is_session_trusted = is_session_trusted
        self._is_density = config.value == "density"
        self._memo: dict[tuple[str, bool], float] = {}
        self._memo_s = -math.inf

    def forget(self) -> None:
        self._memo.clear()

    def horizon_s(self, tier: Tier) -> float:
        """How far ahead a block of `tier` is valued: `horizon_factor` x the time the
        new blocks take to fill the tier (HOT) or the whole cache (HOST)."""
        room = self.room
        is_host = tier is Tier.HOST
        space = room.capacity[0] + (room.capacity[1] if is_host else 0)
        if room.capacity[is_host] == 0 or room.new_per_s <= 0.0:
            return self.config.default_horizon_s
        return max(self.config.min_horizon_s, self.config.horizon_factor * space / room.new_per_s)

    def value_of(self, tenant: str, sessions: tuple[str, ...], tier: Tier, now_s: float, last_s: float,
                 last_uses: Mapping[str, float] | None = None) -> float:
        """Value of blocks of `tier` used by `sessions` (`last_s`: their last use, for
        blocks no session claims; `last_uses`: a block's `BlockMeta.sessions`, for the
        sharing rate)."""
        horizon = self.horizon_s(tier)
        if not sessions:
            return self.fallback(None, now_s, last_s, horizon)
        if now_s != self._memo_s:
            self._memo.clear()
            self._memo_s = now_s
        memo = self._memo
        is_host = tier is Tier.HOST
        trusted = self._is_trusted(tenant)
        long_weight = self.config.long_weight
        long_factor = self.config.long_horizon_factor
        total = 0.0
        miss = 1.0
        for name in sessions:
            value = memo.get((name, is_host))
            if value is None:
                session = self._sessions.get(name)
                curve = self._trusted_curve(session)
                if session is not None and session.moved:
                    value = 0.0
                elif curve is not None:
                    if self._is_density:
                        value = curve.hit_density(now_s, horizon)
                        if long_weight:
                            value += long_weight * curve.hit_density(now_s, long_factor * horizon)
                    else:
                        value = curve.p_within(now_s, horizon)
                    memo[(name, is_host)] = value
                else:
                    value = self.fallback(session, now_s, last_s, horizon)
            total += value
            miss *= 1.0 - min(value, 1.0)
        if last_uses is not None and len(last_uses) > 1 and trusted and self.config.sharing_weight:
            rate = self.config.sharing_weight * sharing_rate(last_uses, now_s, horizon)
            total += rate
            miss *= math.exp(-rate * horizon)
        return total if self._is_density else 1.0 - miss

    def is_forecast(self, sessions: tuple[str, ...]) -> bool:
        """Whether a trusted forecast of one of `sessions` values their blocks (else they
        are valued by their last use alone, in LRU order), as `value_of` decides."""
        return any(self._trusted_curve(self._sessions.get(name)) is not None for name in sessions)

    def _trusted_curve(self, session: SessionState | None):
        """The return curve that values `session`'s blocks: its forecast's, when trusted and
        the session has not moved away; None otherwise (`value_of` and `p_needed` then
        value them 0 when moved, else by the fallback)."""
        if session is None or session.moved or session.curve is None or not self._is_session_trusted(session):
            return None
        return session.curve

    def p_needed(self, tenant: str, sessions: tuple[str, ...], now_s: float, last_s: float, horizon_s: float) -> float:
        """P(some session in `sessions` needs its blocks within `horizon_s`), the most
        likely one's (demand for reservations; not memoised)."""
        best = 0.0
        for name in sessions or ("",):
            session = self._sessions.get(name)
            curve = self._trusted_curve(session)
            if session is not None and session.moved:
                p = 0.0
            elif curve is not None:
                p = curve.p_within(now_s, horizon_s)
            else:
                p = self.fallback_p(session, now_s, last_s, horizon_s)
            best = max(best, p)
        return best

    def fallback_p(self, session: SessionState | None, now_s: float, last_s: float, horizon_s: float) -> float:
        """P(needed within `horizon_s`) of blocks without a trusted forecast: `fallback_p`
        decayed over the time idle since the later of the session's last request and the
        blocks' last use `last_s` (LRU order)."""
        idle_s = now_s - (last_s if session is None else max(last_s, session.last_use_s))
        return self.config.fallback_p * math.exp(-max(0.0, idle_s) / horizon_s)

    def fallback(self, session: SessionState | None, now_s: float, last_s: float, horizon_s: float) -> float:
        """The value of blocks without a trusted forecast (`fallback_p`, per second held
        for `density`)."""
        p = self.fallback_p(session, now_s, last_s, horizon_s)
        return p / horizon_s if self._is_density else p


def sharing_rate(last_uses: Mapping[str, float], now_s: float, horizon_s: float = math.inf) -> float:
    """Sessions per second that came to a block, from the last uses `last_uses` (its
    `BlockMeta.sessions`, oldest first, the most recent few only); 0 for a block one
    session used.

    The sessions after the oldest one came over the time since it: (sessions - 1) /
    (now - oldest use). With the block's horizon `horizon_s`, also the same rate with
    each arrival and each second of that span weighted by exp(-age / horizon_s) (the
    maximum-likelihood rate of arrivals whose rate drifts over about a horizon), and the
    higher of the two: sessions that came within the last horizon raise the rate at
    once, so of two tenants' shared prefixes the one whose sessions came just now
    outranks one whose sessions came longer ago at a higher average rate (FI91: in a
    burst of new sessions that is the prefix the next ones need), while a long history
    keeps its whole-span rate when recent arrivals are fewer."""
    if len(last_uses) < 2:
        return 0.0
    uses = iter(last_uses.values())
    span_s = now_s - next(uses)
    if span_s <= 0.0:
        return 0.0
    rate = (len(last_uses) - 1) / span_s
    if not 0.0 < horizon_s < math.inf:   # (no horizon measured yet: the whole-span rate alone)
        return rate
    arrivals = sum(math.exp(-max(0.0, now_s - use_s) / horizon_s) for use_s in uses)
    return max(rate, arrivals / (-horizon_s * math.expm1(-span_s / horizon_s)))
