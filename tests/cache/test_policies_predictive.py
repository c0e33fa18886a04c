"""PredictivePolicy on hand-drawn layouts: pins, prefetch, reservations, LRU fallback."""
from __future__ import annotations

import math
from statistics import NormalDist

import pytest

from cache.block_manager import BlockManager
from cache.forecast import END_SYMBOL, Forecast
from cache.lru import LRUPolicy
from cache.policies import make_policy
from cache.policies.predictive import PredictivePolicy
from cache.policies.predictive_config import PredictiveConfig
from cache.policy import EvictionPolicy
from cache.tiers import Tier

_NORMAL = NormalDist()
_Z = (-3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0)
BLOCK = 2


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def lognormal_forecast(session: str, made_at_s: float, median_s: float, sigma: float, p_return: float,
                       next_step: str = "search", tenant: str = "t", confident: bool = True) -> Forecast:
    """A forecast whose return time is log-normal (as the built-in source makes them)."""
    points = tuple((median_s * math.exp(sigma * z), p_return * _NORMAL.cdf(z)) for z in _Z)
    etas = tuple((q, median_s * math.exp(sigma * _NORMAL.inv_cdf(q))) for q in (0.1, 0.5, 0.9, 0.99))
    return Forecast(tenant=tenant, session=session, made_at_s=made_at_s,
                    next_step={next_step: p_return, END_SYMBOL: 1.0 - p_return}, p_end=1.0 - p_return,
                    p_return_within=points, eta_quantiles_s=etas, confident=confident)


def policy(**knobs: object) -> PredictivePolicy:
    """Horizons fixed at `default_horizon_s` (no rate is ever measured), no reservations."""
    knobs.setdefault("rate_half_life_s", 1e12)
    knobs.setdefault("reserve_frac", 0.0)
    return PredictivePolicy(PredictiveConfig(**knobs))  # type: ignore[arg-type]


def manager(policy_: EvictionPolicy, clock: Clock, hot: int, host: int = 0) -> BlockManager:
    return BlockManager(num_hot_blocks=hot, num_host_blocks=host, block_size=BLOCK, policy=policy_, clock=clock)


def serve(mgr: BlockManager, clock: Clock, t_s: float, tenant: str, session: str, tokens: list[int]) -> tuple[int, int]:
    """One request at `t_s` (after the policy's due work); returns (HOT hits, HOST hits)."""
    clock.now_s = t_s
    mgr.tick(t_s)
    hashes, blocks = mgr.hash_prompt(tenant, tokens)
    match = mgr.match(tenant, hashes, blocks)
    held = mgr.acquire(tenant, session, match, len(tokens))
    num_hot = min(len(held), len(match.hot_block_ids))
    num_host = len(held) - num_hot
    held += [block_id for block_id, _ in mgr.commit(tenant, session, hashes, blocks, len(held))]
    mgr.release(held)
    return num_hot, num_host


def tiers_of(mgr: BlockManager, tenant: str, tokens: list[int]) -> list[Tier | None]:
    hashes, _ = mgr.hash_prompt(tenant, tokens)
    return [None if mgr.find(h) is None else mgr.find(h).tier for h in hashes]


def prompt(session_index: int, num_blocks: int) -> list[int]:
    return [1000 * session_index + i for i in range(num_blocks * BLOCK)]


def test_make_policy_names() -> None:
    assert isinstance(make_policy("lru"), LRUPolicy)
    assert isinstance(make_policy("predictive", horizon_factor=3.0), PredictivePolicy)
    with pytest.raises(ValueError, match="simulator"):
        make_policy("belady")
    with pytest.raises(ValueError):
        make_policy("predictive", no_such_knob=1)
    with pytest.raises(ValueError):
        make_policy("fifo")


def test_predictive_pinned_session_survives_pressure_until_ttl_then_yields() -> None:
    """Session A waits on a tool (median 2 s, may also have ended): pinned until its
    0.99 return quantile (~6.4 s). Sessions without forecasts (LRU-valued) churn the
    cache meanwhile: they go first while the pin lasts, A goes first after it."""
    clock = Clock()
    mgr = manager(policy(pin_quantile=0.99), clock, hot=8)
    a = prompt(0, 4)
    serve(mgr, clock, 0.0, "t", "A", a)
    mgr.apply(lognormal_forecast("A", 0.0, median_s=2.0, sigma=0.5, p_return=0.5))
    assert mgr.policy.is_pinned("A", 1.0)
    for i, t_s in enumerate((1.0, 2.0, 3.0, 4.0, 5.0, 6.0), start=1):
        serve(mgr, clock, t_s, "t", f"B{i}", prompt(i, 2))
        assert tiers_of(mgr, "t", a) == [Tier.HOT] * 4, f"A lost blocks under pressure at {t_s}s"
    serve(mgr, clock, 7.0, "t", "B7", prompt(7, 2))
    assert not mgr.policy.is_pinned("A", 7.0)
    assert tiers_of(mgr, "t", a).count(None) == 2  # the tail went first, the head is still there
    clock2 = Clock()
    unpinned = manager(policy(pin_cap_frac=0.0), clock2, hot=8)  # same layout, no pins: A fades once overdue
    serve(unpinned, clock2, 0.0, "t", "A", a)
    unpinned.apply(lognormal_forecast("A", 0.0, median_s=2.0, sigma=0.5, p_return=0.5))
    for i, t_s in enumerate((1.0, 2.0, 3.0, 4.0, 5.0, 6.0), start=1):
        serve(unpinned, clock2, t_s, "t", f"B{i}", prompt(i, 2))
    assert None in tiers_of(unpinned, "t", a)


def test_predictive_session_moved_elsewhere_loses_its_pin_and_goes_first() -> None:
    """A is pinned across a tool call, then the router sends its next request to
    another worker: here its pin ends and its blocks go before the idle LRU-valued
    ones of B1, although A's are newer. Back here, A is valued (and pinned) again."""
    clock = Clock()
    mgr = manager(policy(pin_quantile=0.99), clock, hot=8)
    b1, a = prompt(1, 2), prompt(0, 4)
    serve(mgr, clock, 0.0, "t", "B1", b1)
    serve(mgr, clock, 0.5, "t", "A", a)
    mgr.apply(lognormal_forecast("A", 0.5, median_s=2.0, sigma=0.5, p_return=0.9))
    assert mgr.policy.is_pinned("A", 1.0)
    clock.now_s = 1.0
    mgr.session_moved("A")
    assert not mgr.policy.is_pinned("A", 1.0)
    serve(mgr, clock, 1.5, "t", "B2", prompt(2, 4))  # needs 2 more blocks than are free
    assert tiers_of(mgr, "t", b1) == [Tier.HOT] * 2
    assert tiers_of(mgr, "t", a).count(None) == 2
    mgr.session_moved("A")  # a repeat changes nothing
    serve(mgr, clock, 2.0, "t", "A", a)  # A is back on this worker
    mgr.apply(lognormal_forecast("A", 2.0, median_s=2.0, sigma=0.5, p_return=0.9))
    assert mgr.policy.is_pinned("A", 2.5)


def test_lru_ignores_session_moves() -> None:
    orders = []
    for move in (False, True):
        clock = Clock()
        mgr = manager(LRUPolicy(), clock, hot=4)
        serve(mgr, clock, 0.0, "t", "A", prompt(0, 2))
        serve(mgr, clock, 1.0, "t", "B", prompt(1, 2))
        if move:
            mgr.session_moved("B")
        serve(mgr, clock, 2.0, "t", "C", prompt(2, 2))
        orders.append([tiers_of(mgr, "t", prompt(i, 2)) for i in range(3)])
    assert orders[0] == orders[1] == [[None, None], [Tier.HOT] * 2, [Tier.HOT] * 2]


def test_predictive_pin_yields_to_a_request_that_needs_the_room() -> None:
    """No wedge: a request needing every slot gets them even while A is pinned."""
    clock = Clock()
    mgr = manager(policy(pin_quantile=0.99), clock, hot=8)
    a = prompt(0, 4)
    serve(mgr, clock, 0.0, "t", "A", a)
    mgr.apply(lognormal_forecast("A", 0.0, median_s=2.0, sigma=0.5, p_return=0.5))
    serve(mgr, clock, 1.0, "t", "big", prompt(1, 8))
    assert tiers_of(mgr, "t", prompt(1, 8)) == [Tier.HOT] * 8
    assert tiers_of(mgr, "t", a) == [None] * 4


def test_predictive_pins_are_capped_per_tenant() -> None:
    clock = Clock()
    mgr = manager(policy(pin_cap_frac=0.5), clock, hot=8)
    serve(mgr, clock, 0.0, "t", "fill", prompt(9, 8))  # learn the capacity (8 blocks)
    serve(mgr, clock, 1.0, "t", "A", prompt(0, 3))
    mgr.apply(lognormal_forecast("A", 1.0, median_s=5.0, sigma=0.5, p_return=1.0))
    serve(mgr, clock, 1.5, "t", "C", prompt(1, 3))
    mgr.apply(lognormal_forecast("C", 1.5, median_s=5.0, sigma=0.5, p_return=1.0))
    assert mgr.policy.is_pinned("A", 2.0)
    assert not mgr.policy.is_pinned("C", 2.0)  # 3 + 3 blocks would exceed half of 8


@pytest.mark.parametrize("prefetch", [True, False])
def test_predictive_prefetch_turns_host_hit_into_hot_hit(prefetch: bool) -> None:
    """A waits on a tool due back at ~10 s; B's request pushes A to HOST at 1 s. With
    prefetch, A's chain is copied back before 10 s and the return hits HOT."""
    clock = Clock()
    mgr = manager(policy(prefetch=prefetch), clock, hot=4, host=8)
    a = prompt(0, 3)
    serve(mgr, clock, 0.0, "t", "A", a)
    mgr.apply(lognormal_forecast("A", 0.0, median_s=10.0, sigma=0.2, p_return=1.0))
    serve(mgr, clock, 1.0, "t", "B", prompt(1, 4))
    assert tiers_of(mgr, "t", a) == [Tier.HOST] * 3
    for step in range(1, 40):
        clock.now_s = 1.0 + 0.25 * step
        mgr.tick(clock.now_s)
    num_hot, num_host = serve(mgr, clock, 11.0, "t", "A", a + [7, 7])
    counts = mgr.policy.prefetch_counts()
    if prefetch:
        assert (num_hot, num_host) == (3, 0)
        assert (counts.num_prefetched, counts.num_used, counts.num_wasted) == (3, 3, 0)
    else:
        assert (num_hot, num_host) == (0, 3)
        assert counts.num_prefetched == 0


def away_in_host(mgr, clock) -> None:
    """A (3 blocks, pinned while HOT has not filled) waits on a tool due back at ~10 s;
    B's request pushes A to HOST at 1 s; ticks until 10.75 s prefetch A's 3 blocks."""
    serve(mgr, clock, 0.0, "t", "A", prompt(0, 3))
    mgr.apply(lognormal_forecast("A", 0.0, median_s=10.0, sigma=0.2, p_return=1.0))
    serve(mgr, clock, 1.0, "t", "B", prompt(1, 4))
    for step in range(1, 40):
        clock.now_s = 1.0 + 0.25 * step
        mgr.tick(clock.now_s)


def test_predictive_prefetch_wasted_when_the_session_never_returns() -> None:
    clock = Clock()
    mgr = manager(policy(), clock, hot=4, host=8)
    away_in_host(mgr, clock)
    serve(mgr, clock, 12.0, "t", "C", prompt(2, 4))  # A never came; C needs all of HOT
    counts = mgr.policy.prefetch_counts()
    assert (counts.num_prefetched, counts.num_used, counts.num_wasted) == (3, 0, 3)


def test_predictive_reservations_hold_under_a_noisy_tenant() -> None:
    """`quiet` keeps a 6-block session within its 8-block share while `noisy` floods the
    cache with fresh sessions: `noisy` is over its share, so its blocks go first. LRU,
    and the same policy without reservations, give `quiet`'s older blocks away."""
    quiet = prompt(0, 6)

    def run(policy_: EvictionPolicy) -> list[Tier | None]:
        clock = Clock()
        mgr = manager(policy_, clock, hot=20)
        serve(mgr, clock, 0.0, "quiet", "q", quiet)
        for i in range(1, 30):
            serve(mgr, clock, float(i), "noisy", f"n{i}", prompt(i, 3))
        return tiers_of(mgr, "quiet", quiet)

    shares = (("quiet", 0.4), ("noisy", 0.4))
    assert run(policy(static_shares=shares, reserve_frac=0.8)) == [Tier.HOT] * 6
    assert run(policy()) == [None] * 6
    assert run(LRUPolicy()) == [None] * 6


def test_reservations_fixed_while_running_hold_from_the_next_tick() -> None:
    """The noisy-tenant run above with the shares set on the running manager (a config
    reload) instead of at construction: `quiet` keeps its blocks all the same."""
    assert manager(LRUPolicy(), Clock(), hot=4).set_static_shares({"quiet": 0.5}) is False   # nothing to fix
    quiet = prompt(0, 6)
    clock = Clock()
    mgr = manager(policy(), clock, hot=20)   # without the shares, `quiet` loses all 6 (above)
    serve(mgr, clock, 0.0, "quiet", "q", quiet)
    assert mgr.set_static_shares({"quiet": 0.4, "noisy": 0.4}) is True
    for i in range(1, 30):
        serve(mgr, clock, float(i), "noisy", f"n{i}", prompt(i, 3))
    assert tiers_of(mgr, "quiet", quiet) == [Tier.HOT] * 6
    assert mgr.reservations() == {"quiet": pytest.approx(8.0), "noisy": pytest.approx(8.0)}


def test_reservations_find_the_same_victims_asking_each_tenant_or_the_tiers_ranking(monkeypatch) -> None:
    """Many tenants, a few of them noisy: whether the policy finds the cheapest group of
    the tenants over their share in the tier's ranking or (past MAX_SKIPS cheaper groups
    of the others) by asking each tenant, every block ends where it ends the other way."""
    import cache.policies.predictive_upkeep as upkeep

    def run(max_skips: int) -> list[list[Tier | None]]:
        monkeypatch.setattr(upkeep, "MAX_SKIPS", max_skips)
        clock = Clock()
        mgr = manager(policy(reserve_frac=0.5, replan_interval_s=5.0), clock, hot=40)
        prompts = []
        for i in range(120):
            tenant = f"noisy{i % 2}" if i % 3 else f"quiet{i % 9}"
            prompts.append((tenant, prompt(i, 1 + i % 4)))
            serve(mgr, clock, float(i), tenant, f"s{i}", prompts[-1][1])
        return [tiers_of(mgr, tenant, tokens) for tenant, tokens in prompts]

    scanned, asked = run(10**9), run(0)
    assert scanned == asked and sum(t is Tier.HOT for tiers in scanned for t in tiers) == 40


def test_predictive_reservations_follow_forecast_demand() -> None:
    clock = Clock()
    pol = policy(reserve_frac=0.5, equal_frac=0.0)
    mgr = manager(pol, clock, hot=16)
    serve(mgr, clock, 0.0, "busy", "b", prompt(0, 8))
    mgr.apply(lognormal_forecast("b", 0.0, 2.0, 0.3, 1.0, tenant="busy"))
    serve(mgr, clock, 0.5, "idle", "i", prompt(1, 8))
    mgr.apply(lognormal_forecast("i", 0.5, 2.0, 0.3, 0.05, tenant="idle"))
    serve(mgr, clock, 1.0, "busy", "b2", prompt(2, 2))  # makes room: the capacity is known
    mgr.tick(1.0)
    assert pol.reserved_blocks("busy") > 4 * pol.reserved_blocks("idle") > 0
    assert pol.reserved_blocks("busy") + pol.reserved_blocks("idle") == pytest.approx(8.0)


def test_predictive_unconfident_tenant_is_evicted_in_lru_order() -> None:
    """Forecasts marked not confident are ignored: the older session goes first, though
    its forecast says it is due back at once; trusted, the same forecasts flip it."""
    def victim_session(confident: bool) -> str:
        clock = Clock()
        mgr = manager(policy(), clock, hot=6)
        serve(mgr, clock, 0.0, "t", "old", prompt(0, 3))
        mgr.apply(lognormal_forecast("old", 0.0, 1.5, 0.2, 1.0, confident=confident))
        serve(mgr, clock, 1.0, "t", "new", prompt(1, 3))
        mgr.apply(lognormal_forecast("new", 1.0, 300.0, 0.2, 0.2, confident=confident))
        serve(mgr, clock, 1.2, "t", "x", prompt(2, 1))
        return "old" if None in tiers_of(mgr, "t", prompt(0, 3)) else "new"

    assert victim_session(confident=False) == "old"
    assert victim_session(confident=True) == "new"


def test_predictive_falls_back_when_forecasts_prove_inaccurate() -> None:
    """Confident forecasts that keep promising returns that never come make the tenant
    untrusted (LRU) after `accuracy_min_events` outcomes."""
    clock = Clock()
    pol = policy(accuracy_min_events=10, accuracy_alpha=0.2)
    mgr = manager(pol, clock, hot=64)
    for i in range(30):
        serve(mgr, clock, 10.0 * i, "t", f"s{i}", prompt(i, 1))
        mgr.apply(lognormal_forecast(f"s{i}", 10.0 * i, 1.0, 0.2, 0.99))
        assert i >= 10 or pol.is_trusted("t")
        assert i >= 9 or pol.forecast_verdicts() == {}   # too few outcomes scored to say
    clock.now_s = 400.0
    mgr.tick(400.0)
    assert not pol.is_trusted("t")
    assert pol.forecast_verdicts() == {"t": False}   # shown in /metrics as forecasts_followed 0


def test_predictive_demotes_valuable_victims_and_drops_worthless_ones() -> None:
    clock = Clock()
    mgr = manager(policy(), clock, hot=2, host=2)
    serve(mgr, clock, 0.0, "t", "keep", prompt(0, 2))
    mgr.apply(lognormal_forecast("keep", 0.0, 30.0, 0.3, 1.0))
    serve(mgr, clock, 1.0, "t", "x", prompt(1, 2))  # "keep" demoted: HOST has room
    assert tiers_of(mgr, "t", prompt(0, 2)) == [Tier.HOST] * 2
    mgr.apply(lognormal_forecast("x", 1.0, 30.0, 0.3, 0.0))  # x has ended
    serve(mgr, clock, 2.0, "t", "y", prompt(2, 2))
    assert tiers_of(mgr, "t", prompt(1, 2)) == [None, None]  # dropped, not demoted over "keep"
    assert tiers_of(mgr, "t", prompt(0, 2)) == [Tier.HOST] * 2


@pytest.mark.parametrize("sharing_weight", [1.0, 0.0])
def test_predictive_values_a_shared_prefix_by_the_rate_sessions_come_to_it(sharing_weight: float) -> None:
    """A document three sessions read within 4 s (each unlikely to return) outlives a
    private chain whose session is more likely back: sessions keep coming to the
    document (2 per 4 s), and no forecast knows the next one yet. Without the sharing
    term (weight 0) the document goes first."""
    clock = Clock()
    mgr = manager(policy(sharing_weight=sharing_weight), clock, hot=8)
    doc, private = prompt(0, 2), prompt(1, 2)
    for i, t_s in enumerate((0.0, 1.0, 2.0)):
        serve(mgr, clock, t_s, "t", f"S{i}", doc)
        mgr.apply(lognormal_forecast(f"S{i}", t_s, median_s=1000.0, sigma=0.5, p_return=0.01, next_step="USER"))
    serve(mgr, clock, 3.0, "t", "Q", private)
    mgr.apply(lognormal_forecast("Q", 3.0, median_s=1000.0, sigma=0.5, p_return=0.3, next_step="USER"))
    serve(mgr, clock, 4.0, "t", "N", prompt(2, 6))  # 2 blocks must go
    kept, lost = (doc, private) if sharing_weight else (private, doc)
    assert tiers_of(mgr, "t", kept) == [Tier.HOT] * 2
    assert tiers_of(mgr, "t", lost) == [None] * 2


def test_sharing_rate_known_answers() -> None:
    from cache.policies.valuation import sharing_rate

    assert sharing_rate({"a": 10.0, "b": 20.0, "c": 30.0}, 40.0) == pytest.approx(2 / 30)
    assert sharing_rate({"a": 10.0}, 40.0) == 0.0
    assert sharing_rate({}, 40.0) == 0.0
    assert sharing_rate({"a": 40.0, "b": 40.0}, 40.0) == 0.0  # no time has passed: no rate yet
    with pytest.raises(ValueError, match="sharing_weight"):
        PredictiveConfig(sharing_weight=-1.0)


def test_predictive_trusts_each_sessions_own_forecast_not_the_tenants_latest() -> None:
    """A tenant's forecasts may differ in confidence (a cold model trusts a tool wait,
    the tool's learned duration, before it can say who comes back after an answer). A's
    forecast is confident (back in about 30 s), B's, made later, is not: A is valued by
    its curve, B ranked as LRU, so pressure at 10 s (every rank refreshed by then) takes
    B's blocks although A's are older. Before, the tenant's latest forecast decided for
    both sessions: B's made A LRU-ranked too, and A, the older, went first."""
    clock = Clock()
    pol = policy()
    mgr = manager(pol, clock, hot=8)
    a, b = prompt(0, 4), prompt(1, 4)
    serve(mgr, clock, 0.0, "t", "A", a)
    mgr.apply(lognormal_forecast("A", 0.0, median_s=30.0, sigma=0.3, p_return=0.95, next_step="USER"))
    serve(mgr, clock, 1.0, "t", "B", b)
    mgr.apply(lognormal_forecast("B", 1.0, median_s=30.0, sigma=0.3, p_return=0.95, next_step="USER",
                                 confident=False))
    assert not pol.is_trusted("t")  # the tenant's latest forecast was not confident
    serve(mgr, clock, 10.0, "t", "C", prompt(2, 2))
    assert tiers_of(mgr, "t", a) == [Tier.HOT] * 4
    assert tiers_of(mgr, "t", b).count(None) == 2
    clock2 = Clock()
    pinned = manager(policy(pin_quantile=0.99), clock2, hot=8)
    serve(pinned, clock2, 0.0, "t", "A", a)
    pinned.apply(lognormal_forecast("A", 0.0, median_s=3.0, sigma=0.3, p_return=0.95, confident=False))
    assert not pinned.policy.is_pinned("A", 0.5)  # an unconfident tool wait is not pinned


def test_predictive_pin_cap_zero_forbids_pins_before_hot_has_filled() -> None:
    # the cap is a fraction of HOT's size, unknown until HOT first fills: 0 x inf was nan,
    # and no pin was ever refused against nan
    for frac, pinned in ((0.0, False), (0.5, True)):
        clock = Clock()
        mgr = manager(policy(pin_cap_frac=frac), clock, hot=8)
        serve(mgr, clock, 0.0, "t", "A", prompt(0, 2))
        mgr.apply(lognormal_forecast("A", 0.0, median_s=2.0, sigma=0.5, p_return=0.9))
        assert mgr.policy.is_pinned("A", 0.5) is pinned


def test_predictive_blocks_without_sessions_go_in_the_order_they_were_released() -> None:
    """Blocks no request named a session for (batch lines, untraced requests) are valued
    by when they were released, not by the newest such block of their tenant: released
    before a session's, they go first; after, they stay. (One group for all of them
    looked as fresh as the newest and sent the session's blocks first.)"""
    clock = Clock()
    mgr = manager(policy(), clock, hot=6)
    serve(mgr, clock, 0.0, "t", None, prompt(0, 2))
    serve(mgr, clock, 5.0, "t", "s", prompt(1, 2))
    serve(mgr, clock, 10.0, "t", None, prompt(2, 2))
    serve(mgr, clock, 12.0, "t", None, prompt(3, 2))
    assert tiers_of(mgr, "t", prompt(0, 2)) == [None, None]
    assert tiers_of(mgr, "t", prompt(1, 2)) == [Tier.HOT, Tier.HOT]
    assert tiers_of(mgr, "t", prompt(2, 2)) == [Tier.HOT, Tier.HOT]


def test_predictive_fallback_counts_a_sessions_idle_time_from_its_blocks_release() -> None:
    """A session without a trusted forecast is idle since its blocks were released, not
    since its request arrived: a request that ran 8 s keeps its blocks over ones released
    while it ran."""
    clock = Clock()
    mgr = manager(policy(), clock, hot=4)
    hashes, blocks = mgr.hash_prompt("t", prompt(0, 2))
    held = [block_id for block_id, _ in mgr.commit("t", "long", hashes, blocks, 0)]
    serve(mgr, clock, 5.0, "t", None, prompt(1, 2))
    clock.now_s = 8.0
    mgr.release(held)
    serve(mgr, clock, 9.0, "t", None, prompt(2, 2))
    assert tiers_of(mgr, "t", prompt(0, 2)) == [Tier.HOT, Tier.HOT]
    assert tiers_of(mgr, "t", prompt(1, 2)) == [None, None]


def test_reservation_demand_counts_host_blocks_idle_from_their_last_use_not_their_demotion() -> None:
    """`old`'s sessionless blocks, used at 0, are demoted to HOST at 600 s by `new`'s
    request: the plan made then counts `old`'s demand from its last use (ten horizons
    idle: next to nothing), so `new`, just served, gets nearly all the reserve. Valued
    from the demotion, `old`'s HOST blocks looked as fresh as `new`'s and took half."""
    clock = Clock()
    pol = policy(reserve_frac=0.5, equal_frac=0.0, replan_interval_s=1.0)
    mgr = manager(pol, clock, hot=4, host=8)
    serve(mgr, clock, 0.0, "old", None, prompt(0, 4))
    serve(mgr, clock, 600.0, "new", None, prompt(1, 4))
    assert tiers_of(mgr, "old", prompt(0, 4)) == [Tier.HOST] * 4
    mgr.tick(601.5)
    assert pol.reserved_blocks("old") < 0.01
    assert pol.reserved_blocks("new") == pytest.approx(2.0, abs=0.01)
