"""TTLPinPolicy (Continuum-style) on hand-drawn layouts, and its TTL choice by hand."""
from __future__ import annotations

import math

import pytest

from cache.forecast import Forecast
from cache.lru import LRUPolicy
from cache.policies import make_policy
from cache.policies.ttl_pin import TTLPinPolicy, choose_ttl_s
from cache.tiers import Tier
from tests.cache.test_policies_predictive import Clock, manager, prompt, serve, tiers_of


def tool_wait(session: str, made_at_s: float, etas: tuple[tuple[float, float], ...] = ((0.5, 3.0), (0.99, 5.0)),
              p_end: float = 0.0) -> Forecast:
    return Forecast("t", session, made_at_s, next_step={"search": 1.0 - p_end, "END": p_end}, p_end=p_end,
                    eta_quantiles_s=etas, confident=True)


def test_choose_ttl_known_answers() -> None:
    """F rises linearly to 0.5 at 2 s, then to 1 at 100 s. Holding for 2 s costs 1.5
    block-seconds in expectation, for 100 s 26. Priced at 1/T_c per block-second:"""
    forecast = tool_wait("A", 0.0, ((0.5, 2.0), (1.0, 100.0)))
    assert choose_ttl_s(forecast, math.inf) == 100.0   # memory is free: pin to the end
    assert choose_ttl_s(forecast, 1000.0) == 100.0     # 1 - 0.026 > 0.5 - 0.0015
    assert choose_ttl_s(forecast, 10.0) == 2.0         # 0.5 - 0.15 > 1 - 2.6
    assert choose_ttl_s(forecast, 1.0) == 0.0          # 0.5 - 1.5 < 0: do not pin
    # a likely abandoned session is worth less: at T_c = 10, 0.2 x 0.5 - 2 x 0.95 / 10 < 0
    assert choose_ttl_s(tool_wait("A", 0.0, ((0.5, 2.0), (1.0, 100.0)), p_end=0.8), 10.0) == 0.0
    assert choose_ttl_s(tool_wait("A", 0.0, ()), 10.0) == 0.0


def test_ttl_pinned_session_survives_pressure_until_ttl_then_is_lru() -> None:
    """A waits on a tool, pinned to its last quantile (5 s; nothing evicted yet, so memory
    is free). B1..B4 churn the cache: under LRU A goes at the second; pinned it stays.
    At 5 s the pin ends and A's blocks count as released then: the older B blocks go
    first, then A's tail."""
    for policy in (LRUPolicy(), TTLPinPolicy()):
        clock = Clock()
        mgr = manager(policy, clock, hot=8)
        a = prompt(0, 4)
        serve(mgr, clock, 0.0, "t", "A", a)
        mgr.apply(tool_wait("A", 0.0))
        for i, t_s in enumerate((1.0, 2.0, 3.0, 4.0), start=1):
            serve(mgr, clock, t_s, "t", f"B{i}", prompt(i, 2))
        if isinstance(policy, LRUPolicy):
            assert tiers_of(mgr, "t", a) == [None] * 4
            continue
        assert policy.is_pinned("A", 4.0)
        assert tiers_of(mgr, "t", a) == [Tier.HOT] * 4
        serve(mgr, clock, 6.0, "t", "C1", prompt(5, 2))
        serve(mgr, clock, 7.0, "t", "C2", prompt(6, 2))
        assert not policy.is_pinned("A", 7.0)
        assert tiers_of(mgr, "t", a) == [Tier.HOT] * 4  # B3, B4 went first
        assert tiers_of(mgr, "t", prompt(3, 2)) == [None] * 2
        serve(mgr, clock, 8.0, "t", "C3", prompt(7, 2))
        assert tiers_of(mgr, "t", a) == [Tier.HOT, Tier.HOT, None, None]  # tail first


def test_ttl_pin_yields_when_only_pinned_blocks_are_left() -> None:
    """No wedge: a request that needs every slot gets them while A is pinned."""
    clock = Clock()
    policy = TTLPinPolicy()
    mgr = manager(policy, clock, hot=8)
    serve(mgr, clock, 0.0, "t", "A", prompt(0, 4))
    mgr.apply(tool_wait("A", 0.0))
    serve(mgr, clock, 1.0, "t", "big", prompt(1, 8))
    assert tiers_of(mgr, "t", prompt(1, 8)) == [Tier.HOT] * 8


def test_ttl_return_ends_the_pin_and_text_answers_do_not_pin() -> None:
    clock = Clock()
    policy = TTLPinPolicy()
    mgr = manager(policy, clock, hot=16)
    a = prompt(0, 3)
    serve(mgr, clock, 0.0, "t", "A", a)
    mgr.apply(tool_wait("A", 0.0))
    assert policy.is_pinned("A", 1.0)
    assert serve(mgr, clock, 2.0, "t", "A", a + [9] * 4) == (3, 0)
    assert not policy.is_pinned("A", 2.5)
    mgr.apply(Forecast("t", "A", 2.0, next_step={"USER": 1.0}, confident=True))
    assert not policy.is_pinned("A", 2.5)
    assert policy.num_pins == 1


def test_ttl_cold_tool_gets_the_cold_ttl_and_options_are_checked() -> None:
    clock = Clock()
    policy = make_policy("ttl", cold_ttl_s=2.0)
    mgr = manager(policy, clock, hot=8)
    serve(mgr, clock, 0.0, "t", "A", prompt(0, 2))
    mgr.apply(tool_wait("A", 0.0, etas=()))
    assert policy.is_pinned("A", 1.9) and not policy.is_pinned("A", 2.0)
    with pytest.raises(ValueError, match="ttl"):
        make_policy("ttl", pin_quantile=0.9)


def test_ttl_prices_memory_by_the_lru_turnover_it_measures() -> None:
    """X's four blocks leave HOT 10 s after their last use, so holding a block costs one
    refill per 10 s: Y's pin then lasts 2 s, as choose_ttl_s says for T_c = 10."""
    clock = Clock()
    policy = TTLPinPolicy()
    mgr = manager(policy, clock, hot=4)
    serve(mgr, clock, 0.0, "t", "X", prompt(0, 4))
    assert policy.turnover_s == math.inf
    serve(mgr, clock, 10.0, "t", "Y", prompt(1, 4))
    assert policy.turnover_s == pytest.approx(10.0)
    mgr.apply(tool_wait("Y", 10.0, ((0.5, 2.0), (1.0, 100.0))))
    assert policy.is_pinned("Y", 11.9) and not policy.is_pinned("Y", 12.0)
    mgr.apply(tool_wait("Y", 10.0, ((0.5, 20.0), (1.0, 30.0))))  # slow tool: not worth holding
    assert policy.num_declined == 1


def test_ttl_turnover_counts_victims_not_blocks_a_cache_clear_drops() -> None:
    clock = Clock()
    policy = TTLPinPolicy()
    mgr = manager(policy, clock, hot=4)
    serve(mgr, clock, 0.0, "t", "X", prompt(0, 4))
    clock.now_s = 50.0
    mgr.clear()  # X's blocks go, 50 s after their last use, but no LRU victim left
    assert policy.turnover_s == math.inf
    serve(mgr, clock, 60.0, "t", "Y", prompt(1, 4))
    serve(mgr, clock, 70.0, "t", "Z", prompt(2, 4))  # evicts Y's blocks, 10 s idle
    assert policy.turnover_s == pytest.approx(10.0)
