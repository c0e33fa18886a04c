"""Parts of the policies: return curves, the group index, pins, reservations, Belady."""
from __future__ import annotations

import math

import pytest

from cache.block_meta import BlockMeta, LineageId
from cache.forecast import Forecast
from cache.hashing import BlockHash
from cache.policies.accuracy import TenantAccuracy
from cache.policies.belady import BeladyPolicy
from cache.policies.groups import GroupIndex
from cache.policies.pins import PinBook
from cache.policies.reservations import ReservationPlan
from cache.policies.return_curve import TAIL_FACTOR, ReturnCurve
from cache.tiers import Tier


def block(uid: int, position: int = 0, sessions: tuple[str, ...] = ("s",), tier: Tier = Tier.HOT,
          tenant: str = "t") -> BlockMeta:
    meta = BlockMeta(id=uid, tier=tier, uid=LineageId(uid), hash=BlockHash(uid), tokens=(), tenant=tenant,
                     salt=b"", parent_hash=None, parent_uid=None, position=position)
    meta.sessions.update({name: 0.0 for name in sessions})
    return meta


def test_return_curve_interpolates_in_log_time_and_closes_at_p_ever() -> None:
    forecast = Forecast("t", "s", made_at_s=10.0, p_end=0.2, p_return_within=((1.0, 0.2), (4.0, 0.6)))
    curve = ReturnCurve.from_forecast(forecast)
    assert curve is not None
    assert curve.p_by(0.5) == pytest.approx(0.1)  # linear from the origin before the first point
    assert curve.p_by(2.0) == pytest.approx(0.4)  # halfway in log time
    assert curve.p_by(4.0 * TAIL_FACTOR) == pytest.approx(0.8)
    assert curve.p_by(1e9) == pytest.approx(0.8)
    assert curve.p_within(10.0 + 4.0, 1e9) == pytest.approx((0.8 - 0.6) / 0.4)  # conditioned on waiting


def test_return_curve_merges_eta_quantiles_and_handles_certain_ends() -> None:
    forecast = Forecast("t", "s", 0.0, p_end=0.5, eta_quantiles_s=((0.5, 2.0), (0.9, 8.0)))
    curve = ReturnCurve.from_forecast(forecast)
    assert curve.p_by(2.0) == pytest.approx(0.25) and curve.p_by(8.0) == pytest.approx(0.45)
    ended = ReturnCurve.from_forecast(Forecast("t", "s", 0.0, p_end=1.0))
    assert ended.p_within(5.0, 100.0) == 0.0 and ended.hit_density(5.0, 100.0) == 0.0
    assert ReturnCurve.from_forecast(Forecast("t", "s", 0.0, p_end=0.3)) is None


def test_return_curve_hit_density_prefers_sooner_returns() -> None:
    soon = ReturnCurve.from_forecast(Forecast("t", "s", 0.0, p_end=0.0, p_return_within=((4.9, 0.0), (5.0, 1.0))))
    late = ReturnCurve.from_forecast(Forecast("t", "s", 0.0, p_end=0.0, p_return_within=((49.0, 0.0), (50.0, 1.0))))
    assert soon.p_within(0.0, 100.0) == late.p_within(0.0, 100.0) == pytest.approx(1.0)
    assert soon.hit_density(0.0, 100.0) > 5 * late.hit_density(0.0, 100.0)


def test_group_index_ranks_groups_and_takes_the_deepest_block_first() -> None:
    index = GroupIndex()
    a0, a1, a2 = block(1, 0, ("a",)), block(2, 1, ("a",)), block(3, 2, ("a",))
    shared = block(4, 0, ("a", "b"))
    for meta in (a0, a2, a1, shared):
        group, is_new = index.add(meta, 0.0)
        if is_new:
            index.rank(group, 1.0 if group.sessions == ("a",) else 5.0, due_s=10.0)
    value, group = index.top(Tier.HOT, "t")
    assert (value, group.sessions) == (1.0, ("a",))
    assert GroupIndex.victim(group) is a2
    index.remove(a2)
    assert GroupIndex.victim(group) is a1
    index.rank(group, 9.0, due_s=3.0)
    assert index.top(Tier.HOT, "t")[1].sessions == ("a", "b")
    assert index.pop_due(2.0) == [] and index.pop_due(3.0) == [group]
    for meta in (a0, a1, shared):
        index.remove(meta)
    assert index.top(Tier.HOT, "t") is None and len(index) == 0


def test_group_index_finds_the_cheapest_group_of_the_tier_and_of_the_tenants_accepted() -> None:
    index = GroupIndex()
    values = {"a": (3.0, 7.0), "b": (1.0, 2.0, 4.0), "c": (5.0,)}
    uid = 0
    for tenant, tenant_values in values.items():
        for i, value in enumerate(tenant_values):
            uid += 1
            group, _ = index.add(block(uid, 0, (f"{tenant}{i}",), tenant=tenant), 0.0)
            index.rank(group, value, due_s=10.0)
    host, _ = index.add(block(99, 0, ("h",), Tier.HOST, tenant="c"), 0.0)
    index.rank(host, 0.5, due_s=10.0)
    value, group = index.lowest(Tier.HOT)
    assert (value, group.tenant) == (1.0, "b") and index.lowest(Tier.HOST)[1] is host
    assert index.lowest_accepted(Tier.HOT, lambda t: t != "b", 5)[1][0] == 3.0   # past b's 1 and 2
    assert index.lowest_accepted(Tier.HOT, lambda t: t == "c", 5)[1][0] == 5.0
    assert index.lowest_accepted(Tier.HOT, lambda t: t == "c", 3) == (False, None)   # 4 cheaper: gave up
    assert index.lowest_accepted(Tier.HOT, lambda t: False, 10) == (True, None)
    assert index.lowest(Tier.HOT)[0] == 1.0   # groups passed over are still ranked
    index.rank(group, 8.0, due_s=10.0)   # re-ranked: its old entry is dead
    assert index.lowest(Tier.HOT)[0] == 2.0 and sorted(index.tenants(Tier.HOT)) == ["a", "b", "c"]
    for meta in list(group.blocks):
        index.remove(meta)
    assert [index.lowest(Tier.HOT)[0], index.top(Tier.HOT, "b")[0]] == [2.0, 2.0]


def test_pin_book_caps_and_expires() -> None:
    pins = PinBook()
    assert pins.pin("a", "t", until_s=5.0, num_blocks=3, cap=4, floor=0.1)
    assert not pins.pin("b", "t", until_s=5.0, num_blocks=2, cap=4, floor=0.1)
    assert pins.num_pinned_blocks("t") == 3 and pins.num_refused == 1
    assert pins.is_pinned("a", 4.9) and not pins.is_pinned("a", 5.0)
    assert pins.expire(5.0) == ["a"] and pins.num_pinned_blocks("t") == 0


def test_reservation_plan_splits_by_demand_and_honours_static_shares() -> None:
    plan = ReservationPlan(reserve_frac=0.5, equal_frac=0.5)
    plan.plan(100, {"a": 30.0, "b": 10.0, "idle": 0.0}, now_s=0.0)
    assert plan.reserved("a") == pytest.approx(50 * (0.25 + 0.5 * 0.75))
    assert plan.reserved("b") == pytest.approx(50 * (0.25 + 0.5 * 0.25))
    assert plan.reserved("idle") == 0.0 and plan.is_over("idle", 1)
    static = ReservationPlan(0.5, 0.5, {"a": 0.6})
    static.plan(100, {"b": 5.0}, now_s=0.0)
    assert static.reserved("a") == pytest.approx(60.0) and static.reserved("b") == 0.0
    with pytest.raises(ValueError):
        ReservationPlan(0.5, 0.5, {"a": 0.7, "b": 0.7})
    static.set_static_shares({"b": 0.25})   # a reload: in force at the next plan
    assert static.reservations == {"a": 60.0}
    static.plan(100, {"b": 5.0}, now_s=1.0)
    assert static.reservations == {"b": 25.0}
    static.set_static_shares(None)   # from demand again
    static.plan(100, {"b": 5.0}, now_s=2.0)
    assert static.reservations == {"b": pytest.approx(50.0)}
    with pytest.raises(ValueError):
        static.set_static_shares({"a": -0.1})
    assert static.reservations == {"b": pytest.approx(50.0)}


def test_tenant_accuracy_flags_forecasts_worse_than_the_base_rate() -> None:
    good, bad = TenantAccuracy(), TenantAccuracy()
    for i in range(60):
        returned = i % 2 == 0
        good.add(0.9 if returned else 0.1, returned, alpha=0.1)
        bad.add(0.1 if returned else 0.9, returned, alpha=0.1)
    assert good.is_accurate(30, 0.05) and bad.is_accurate(30, 0.05) is False
    assert TenantAccuracy().is_accurate(30, 0.05) is None


def test_belady_evicts_the_farthest_next_use_deepest_first() -> None:
    policy = BeladyPolicy()
    blocks = [block(i, position=i % 2) for i in range(4)]
    for meta, next_use in zip(blocks, (5.0, 9.0, 9.0, math.inf)):
        policy.note_next_use(meta.hash, next_use)
        policy.on_insert(meta, 0.0)
    assert policy.choose_victim(Tier.HOT, 0.0) == 3
    policy.on_remove(blocks[3])
    assert policy.choose_victim(Tier.HOT, 0.0) == 1  # ties on 9.0: position 1 before 0
    blocks[1].ref_count = 1
    policy.on_access(blocks[1], None, 1.0)
    assert policy.choose_victim(Tier.HOT, 1.0) == 2
    assert policy.choose_victim(Tier.HOST, 1.0) is None


def test_return_curve_area_is_the_exact_integral() -> None:
    curve = ReturnCurve.from_forecast(Forecast("t", "s", 0.0, p_end=0.2, p_return_within=((1.0, 0.2), (4.0, 0.6))))
    for lo, hi in ((0.0, 0.5), (0.0, 3.0), (0.5, 20.0), (2.0, 3.0), (5.0, 50.0)):
        steps = 20_000
        width = (hi - lo) / steps
        numeric = sum(curve.p_by(lo + (k + 0.5) * width) for k in range(steps)) * width
        assert curve.area(lo, hi) == pytest.approx(numeric, rel=1e-6)


def test_return_curve_area_survives_round_off_at_the_points() -> None:
    curve = ReturnCurve.from_forecast(Forecast("t", "s", 0.0, p_end=0.2, p_return_within=((1.0, 0.2), (4.0, 0.6))))
    last = math.exp(curve.log_h[-1])
    first = math.exp(curve.log_h[0])
    assert curve.area(0.0, math.nextafter(last, 0.0)) == pytest.approx(curve.area(0.0, last))
    assert curve.area(0.0, math.nextafter(first, 2.0)) == pytest.approx(curve.area(0.0, first))
