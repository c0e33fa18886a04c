"""Knobs of the predictive policy (one frozen record; every field is a `make_policy` kwarg).

Defaults were chosen on the first half of the Mooncake trace and the generator's agent
workload (benchmarks/bench_policies.py reports the held-out half too); none is specific
to one trace: horizons scale with the measured turnover of each tier, and everything
else is a probability, a quantile or a share.

Invariant: a PredictiveConfig exists only with every field of the type and range in
`OPTION_RULES` (option_checks.py; the error names `policy_options.<field>`), every
pair of `OPTION_BOUNDS` in order (the error names both), and `static_shares` None or
(tenant, fraction in [0, 1]) pairs (or such a mapping; their sum is checked by
reservations.py).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cache.policies.option_checks import (CHOICE, COUNT_RULE, FLAG_RULE, FRACTION, NON_NEGATIVE, POSITIVE,
                                          OptionRule, check_not_above, check_option)

VALUE_MODES = ("density", "within")
# field -> what it must be. Horizons, their factors and the rate's half-life are divided
# by or must stay above 0; the other durations, weights and margins may be 0 ("none": no
# long-horizon term, no sharing bonus, no pins, instant copies, a re-plan or re-rank at
# every tick, ...), not below it (a negative one acts as 0 or turns a feature inside out)
OPTION_RULES: tuple[tuple[str, OptionRule], ...] = (
    ("value", OptionRule(kind=CHOICE, choices=VALUE_MODES)),
    ("horizon_factor", POSITIVE), ("long_horizon_factor", POSITIVE), ("long_weight", NON_NEGATIVE),
    ("default_horizon_s", POSITIVE), ("min_horizon_s", POSITIVE), ("rate_half_life_s", POSITIVE),
    ("refresh_fraction", NON_NEGATIVE), ("min_refresh_s", NON_NEGATIVE), ("sharing_weight", NON_NEGATIVE),
    ("fallback_p", FRACTION), ("pin_quantile", FRACTION), ("max_pin_s", NON_NEGATIVE),
    ("pin_cap_frac", FRACTION), ("prefetch", FLAG_RULE), ("prefetch_quantile", FRACTION),
    ("prefetch_until_quantile", FRACTION), ("prefetch_min_p", FRACTION), ("prefetch_margin", NON_NEGATIVE),
    ("host_to_hot_s_per_block", NON_NEGATIVE), ("reserve_frac", FRACTION), ("equal_frac", FRACTION),
    ("replan_interval_s", NON_NEGATIVE), ("accuracy_alpha", FRACTION), ("accuracy_min_events", COUNT_RULE),
    ("accuracy_margin", NON_NEGATIVE), ("session_idle_forget_s", NON_NEGATIVE),
)
# (field, the field it must not exceed, why). A prefetch is looked at from the early
# return-time quantile until the late one: the other way round there is no window
OPTION_BOUNDS: tuple[tuple[str, str, str], ...] = (
    ("prefetch_quantile", "prefetch_until_quantile", "a prefetch is looked at from the one until the other"),
)


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
        their last uses, or, when higher, that rate with each arrival and second weighted
        by exp(-age / H) (sessions that came just now count at once): a tenant's
        system prompt, a document many conversations read, are reused by sessions no
        forecast knows yet (trusted tenants only; 0: off).
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
        for name, rule in OPTION_RULES:
            check_option(name, getattr(self, name), rule)
        for name, bound, why in OPTION_BOUNDS:
            check_not_above(name, getattr(self, name), bound, getattr(self, bound), why)
        shares = self.static_shares or ()
        for tenant, share in shares.items() if isinstance(shares, Mapping) else shares:
            check_option(f"static_shares.{tenant}", share, FRACTION)
