"""The sharing rate of tenants' shared prefixes when they are all HOT can evict (FI91, FI98).

In a burst of new sessions every private block is held by a running request, and the
tenants' shared system+tools prefixes are the only victims left. The prefix whose
tenant's sessions came just now is the one the next session needs: the sharing rate
is also measured with each arrival weighted by its age over the block's horizon, and
the higher rate counts, so sessions that came just now are not diluted by a long quiet
history.
"""
from __future__ import annotations

import math
from statistics import NormalDist

import pytest

from cache.block_manager import BlockManager
from cache.forecast import END_SYMBOL, Forecast
from cache.policies.predictive import PredictivePolicy
from cache.policies.predictive_config import PredictiveConfig
from cache.policies.valuation import sharing_rate
from cache.tiers import Tier

BLOCK = 2
_NORMAL = NormalDist()
_Z = (-3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0)


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def unlikely_back(tenant: str, session: str, made_at_s: float) -> Forecast:
    """A confident forecast that the session is hardly ever back (log-normal, median 1000 s,
    P(return) 0.01): its own value is next to nothing, so the sharing rate ranks its blocks."""
    points = tuple((1000.0 * math.exp(0.5 * z), 0.01 * _NORMAL.cdf(z)) for z in _Z)
    etas = tuple((q, 1000.0 * math.exp(0.5 * _NORMAL.inv_cdf(q))) for q in (0.1, 0.5, 0.9, 0.99))
    return Forecast(tenant=tenant, session=session, made_at_s=made_at_s,
                    next_step={"USER": 0.01, END_SYMBOL: 0.99}, p_end=0.99,
                    p_return_within=points, eta_quantiles_s=etas, confident=True)


def use(mgr: BlockManager, clock: Clock, t_s: float, tenant: str, session: str, tokens: list[int]) -> None:
    """One short request at `t_s` (admitted, committed and finished at once), then its forecast."""
    clock.now_s = t_s
    mgr.tick(t_s)
    hashes, blocks = mgr.hash_prompt(tenant, tokens)
    held = mgr.acquire(tenant, session, mgr.match(tenant, hashes, blocks), len(tokens))
    held += [block_id for block_id, _ in mgr.commit(tenant, session, hashes, blocks, len(held))]
    mgr.release(held)
    mgr.apply(unlikely_back(tenant, session, t_s))


def cached(mgr: BlockManager, tenant: str, tokens: list[int]) -> list[Tier | None]:
    hashes, _ = mgr.hash_prompt(tenant, tokens)
    return [None if mgr.find(h) is None else mgr.find(h).tier for h in hashes]


def test_the_prefix_of_the_tenant_admitted_just_now_outlives_one_with_a_higher_historical_rate() -> None:
    """A's prefix: sessions at 0 s and just now (199 s, 199.9 s), 2 per 200 s; B's: at 100,
    110 and 120 s, 2 per 100 s. At 200 s a request holds all the room HOT has left and
    needs one prefix's room: B's goes (its sessions came over a horizon ago), A's stays."""
    clock = Clock()
    policy = PredictivePolicy(PredictiveConfig(rate_half_life_s=1e12, reserve_frac=0.0))  # horizon: 60 s
    mgr = BlockManager(num_hot_blocks=6, num_host_blocks=0, block_size=BLOCK, policy=policy, clock=clock)
    prefix_a = list(range(2 * BLOCK))
    prefix_b = list(range(100, 100 + 2 * BLOCK))
    for t_s, tenant, session, tokens in ((0.0, "A", "a0", prefix_a), (199.0, "A", "a1", prefix_a),
                                         (100.0, "B", "b0", prefix_b), (110.0, "B", "b1", prefix_b),
                                         (120.0, "B", "b2", prefix_b), (199.9, "A", "a2", prefix_a)):
        use(mgr, clock, t_s, tenant, session, tokens)
    assert cached(mgr, "A", prefix_a) == [Tier.HOT] * 2 and cached(mgr, "B", prefix_b) == [Tier.HOT] * 2

    clock.now_s = 200.0
    tokens = list(range(500, 500 + 4 * BLOCK))   # a new session's private blocks: 2 must be freed
    hashes, blocks = mgr.hash_prompt("C", tokens)
    held = [block_id for block_id, _ in mgr.commit("C", "c0", hashes, blocks, 0)]
    assert len(held) == 4
    assert cached(mgr, "B", prefix_b) == [None, None]
    assert cached(mgr, "A", prefix_a) == [Tier.HOT] * 2


def test_sharing_rate_over_a_horizon_known_answers() -> None:
    uses = {"a": 10.0, "b": 20.0, "c": 30.0}
    # no horizon (infinite): (sessions - 1) / the time since the oldest use, as before
    assert sharing_rate(uses, 40.0) == pytest.approx(2 / 30)
    assert sharing_rate(uses, 40.0, math.inf) == pytest.approx(2 / 30)
    # arrivals just now, within the horizon: the age-weighted rate, which is higher
    recent = {"a": 10.0, "b": 38.0, "c": 39.0}
    weighted = (math.exp(-2 / 10) + math.exp(-1 / 10)) / (10 * (1 - math.exp(-30 / 10)))
    assert weighted > 2 / 30
    assert sharing_rate(recent, 40.0, 10.0) == pytest.approx(weighted)
    # arrivals spread evenly over the span: the weighted rate is lower, the span's stays
    assert sharing_rate(uses, 40.0, 60.0) == pytest.approx(2 / 30)
    # arrivals a burst long ago: the whole-span rate stays (the weighted one is lower)
    old_burst = {"a": 0.0, "b": 1.0, "c": 2.0}
    assert sharing_rate(old_burst, 100.0, 10.0) == pytest.approx(2 / 100)
    # a horizon far longer than the span gives the unweighted rate
    assert sharing_rate(uses, 40.0, 1e9) == pytest.approx(2 / 30, rel=1e-6)
    # the same count, more recent, is a higher rate; one session, or no time passed, none
    assert sharing_rate({"a": 10.0, "b": 35.0, "c": 39.0}, 40.0, 10.0) > sharing_rate(
        {"a": 10.0, "b": 12.0, "c": 14.0}, 40.0, 10.0)
    assert sharing_rate({"a": 10.0}, 40.0, 60.0) == 0.0
    assert sharing_rate({"a": 40.0, "b": 40.0}, 40.0, 60.0) == 0.0
