"""Knobs of the predictive policy (one frozen record; every field is a `make_policy` kwarg).

Defaults were chosen on the first half of the Mooncake trace and the generator's agent
workload (benchmarks/bench_policies.py reports the held-out half too); none is specific
to one trace: horizons scale with the measured turnover of each tier, and everything
else is a probability, a quantile or a share.
"""
from __future__ import annotations

from dataclasses import dataclass

VALUE_MODES = ("density", "within")


@dataclass(frozen=True, slots=True)
class PredictiveConfig:
    """
    value: "density" ranks by expected returns per second held within the horizon
        (P(return within H) / E[time held]); "within" by P(return within H) alone.
    horizon_factor: the horizon H of HOT is this many times the time new blocks take
        to fill it, of HOST the time they take to fill both tiers; `default_horizon_s`
        until both are known. `long_weight` x the density over `long_horizon_factor` x H
        is added, so returns beyond H still rank (sooner first).
    rate_half_life_s: smoothing of the measured inflow of blocks.
    refresh_fraction / min_refresh_s: a group's rank is recomputed once its forecast has
        aged by this fraction (at least this many seconds).
    sharing_weight: a block that several sessions used is also worth this many times the
        rate at which sessions came to it, (sessions - 1) / the time since the oldest of
        their last uses: a tenant's system prompt, a document many conversations read,
        are reused by sessions no forecast knows yet (trusted tenants only; 0: off).
    fallback_p: P(reuse) assumed for a just-used block without a trusted forecast; such
        blocks decay as exp(-idle / H), which orders them exactly as LRU does.
    pin_quantile / max_pin_s / pin_cap_frac: a tool wait is pinned until this return-time
        quantile (at most `max_pin_s`); a tenant pins at most this fraction of its HOT
        reservation (of the tier when no plan exists).
    prefetch / prefetch_quantile / prefetch_until_quantile / prefetch_min_p: a session's
        HOST blocks are considered for copying back from this return-time quantile minus
        the copy time (`host_to_hot_s_per_block` per block) until the later quantile, and
        copied once P(return within HOT's horizon) reaches `prefetch_min_p`, each block
        only over a HOT block worth under 1 / `prefetch_margin` of the session.
    reserve_frac / equal_frac / replan_interval_s / static_shares: reservations (see
        reservations.py); `static_shares` fixes them as fractions of HOT per tenant.
    accuracy_*: the tenant falls back to LRU while its recent Brier score exceeds its
        base rate's by more than `accuracy_margin` (after `accuracy_min_events` outcomes).
    session_idle_forget_s: sessions idle this long with nothing pinned are forgotten.
    """

    value: str = "density"
    horizon_factor: float = 1.0
    long_horizon_factor: float = 16.0
    long_weight: float = 0.1
    default_horizon_s: float = 60.0
    min_horizon_s: float = 1.0
    rate_half_life_s: float = 30.0
    refresh_fraction: float = 0.25
    min_refresh_s: float = 0.5
    sharing_weight: float = 1.0
    fallback_p: float = 0.5
    pin_quantile: float = 0.9
    max_pin_s: float = 600.0
    pin_cap_frac: float = 0.5
    prefetch: bool = True
    prefetch_quantile: float = 0.1
    prefetch_until_quantile: float = 0.9
    prefetch_min_p: float = 0.5
    prefetch_margin: float = 2.0
    host_to_hot_s_per_block: float = 0.0
    reserve_frac: float = 0.25
    equal_frac: float = 0.5
    replan_interval_s: float = 120.0
    static_shares: tuple[tuple[str, float], ...] | None = None
    accuracy_alpha: float = 0.05
    accuracy_min_events: int = 30
    accuracy_margin: float = 0.05
    session_idle_forget_s: float = 3600.0

    def __post_init__(self) -> None:
        if self.value not in VALUE_MODES:
            raise ValueError(f"value must be one of {VALUE_MODES}, got {self.value!r}")
        if self.sharing_weight < 0:
            raise ValueError("sharing_weight must not be negative")
        if self.horizon_factor <= 0 or self.default_horizon_s <= 0 or self.min_horizon_s <= 0:
            raise ValueError("horizons must be positive")
        for name in ("fallback_p", "pin_quantile", "pin_cap_frac", "prefetch_quantile", "prefetch_until_quantile",
                     "prefetch_min_p", "accuracy_alpha"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1]")
