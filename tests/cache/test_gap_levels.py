"""The gap forecaster's statistics by tenant: a recount redoes the estimates of the
tenants that changed or have waits pending, and leaves an idle tenant's standing."""
from __future__ import annotations

import pytest

import cache.gap_forecaster as gap_forecaster
from cache.forecast_source import RequestSeen
from cache.gap_forecaster import GapForecaster, GapForecasterConfig
from cache.gap_levels import GapLevels


def sessions(forecaster: GapForecaster, tenant: str, num_sessions: int, t0: float, returns: bool = True) -> float:
    """Sessions of `tenant` 100 s apart: a tool call, and (if `returns`) its return 3 s later."""
    t = t0
    for i in range(num_sessions):
        forecaster.observe(RequestSeen(tenant, f"{tenant}-{t0}-{i}", t, tool_calls=("search",), num_blocks=2))
        if returns:
            forecaster.observe(RequestSeen(tenant, f"{tenant}-{t0}-{i}", t + 3.0, num_blocks=3))
        t += 100.0
    return t


def test_an_index_lists_each_tenants_levels_and_a_change_unsettles_the_tenant() -> None:
    levels = GapLevels()
    levels.gap_stats(("a", "user")).add(2.0)
    levels.return_counts(("a",)).num_returned += 1
    levels.return_counts(("b", "tool:x", 1)).num_ended += 1
    levels.return_counts(())
    assert list(levels.levels_of("a")) == [("a", "user"), ("a",)] and list(levels.levels_of("b")) == [("b", "tool:x", 1)]
    assert list(levels.levels_of("nobody")) == []
    levels.changed("a")
    levels.unsettle("b")
    assert levels.take_unsettled() == {"a", "b"} and levels.take_unsettled() == set()
    assert levels.change_marks() == {"a": 1}   # unsettling alone is no change to save


def test_an_idle_tenants_estimates_stand_until_it_changes(monkeypatch) -> None:
    forecaster = GapForecaster(GapForecasterConfig(recount_every=10**9))
    t = sessions(forecaster, "idle", 30, 0.0, returns=False)   # every wait of "idle" ends...
    forecaster.forecast("idle", "x", t + 10_000.0)   # ...given up long ago
    forecaster._recount(t + 10_000.0)
    stats = forecaster._stats
    idle_before = {k: v for k, v in stats.p_estimates.items() if k and k[0] == "idle"}
    global_before = stats.p_estimates[()]
    sessions(forecaster, "busy", 40, t + 20_000.0)   # all return: the all-tenant odds rise
    calls = []
    real = gap_forecaster.censored_p_return
    monkeypatch.setattr(gap_forecaster, "censored_p_return", lambda *a, **k: calls.append(a) or real(*a, **k))
    forecaster._recount(t + 30_000.0)
    assert stats.p_estimates[()] > global_before + 0.1
    assert {k: v for k, v in stats.p_estimates.items() if k and k[0] == "idle"} == idle_before
    busy_levels = [k for k in stats.p_estimates if k and k[0] == "busy"]
    assert len(calls) == 1 + len(busy_levels)   # the all-tenant level and the busy tenant's, not the idle one's
    stats.unsettle("idle")   # now redone against the new all-tenant odds: a known answer
    forecaster._recount(t + 30_000.0)
    counts = stats.returns[("idle",)]
    assert stats.p_estimates[("idle",)] == pytest.approx(counts.shrunk(stats.p_estimates[()], 10.0))
    assert stats.p_estimates[("idle",)] > idle_before[("idle",)]


def test_an_incremental_recount_matches_a_full_one_for_the_tenants_it_redoes() -> None:
    def fed() -> GapForecaster:
        forecaster = GapForecaster(GapForecasterConfig(recount_every=10**9))
        for i, tenant in enumerate(("a", "b", "c")):
            sessions(forecaster, tenant, 10 + 5 * i, 7.0 * i, returns=i != 1)
        forecaster.observe(RequestSeen("a", "pending", 5_000.0, tool_calls=("search",), num_blocks=2))
        return forecaster

    incremental, full = fed(), fed()
    incremental._recount(4_000.0)   # settles every tenant once
    sessions(incremental, "c", 3, 4_100.0)
    sessions(full, "c", 3, 4_100.0)
    incremental._recount(5_010.0)
    for tenant in ("a", "b", "c"):
        full._stats.unsettle(tenant)
    full._recount(5_010.0)
    redone = {k: v for k, v in full._stats.p_estimates.items() if not k or k[0] in ("a", "c")}
    assert {k: v for k, v in incremental._stats.p_estimates.items() if not k or k[0] in ("a", "c")} == redone


def test_waits_dropped_for_room_unsettle_their_tenant_and_leave_no_estimate_behind() -> None:
    forecaster = GapForecaster(GapForecasterConfig(recount_every=10**9, max_sessions=2))
    forecaster.observe(RequestSeen("a", "s", 0.0, tool_calls=("rare",), num_blocks=2))
    forecaster._recount(1.0)
    rare = [k for k in forecaster._stats.p_estimates if k and k[0] == "a" and "tool:rare" in k]
    assert rare and all(k not in forecaster._stats.returns for k in rare)   # pending waits only
    forecaster.observe(RequestSeen("a", "s0", 1.5, num_blocks=2))
    forecaster.observe(RequestSeen("b", "s1", 2.0, num_blocks=2))   # "a" waits most: its oldest is dropped for room
    forecaster._recount(3.0)
    assert not any(k in forecaster._stats.p_estimates for k in rare)


def test_one_tenants_flood_of_sessions_drops_its_own_waits_not_anothers() -> None:
    """Room for a new wait comes from the tenant waiting on the most sessions (its oldest),
    the newcomer's counted: "a", within its share of `max_sessions`, keeps its wait while
    "b" floods, and its return is still learned from."""
    forecaster = GapForecaster(GapForecasterConfig(recount_every=10**9, max_sessions=4))
    forecaster.observe(RequestSeen("a", "kept", 0.0, tool_calls=("search",), num_blocks=2))
    for i in range(20):
        forecaster.observe(RequestSeen("b", f"flood{i}", 1.0 + i, num_blocks=2))
    assert sorted(forecaster._waiting) == [("a", "kept"), ("b", "flood17"), ("b", "flood18"), ("b", "flood19")]
    forecaster.observe(RequestSeen("a", "kept", 30.0, num_blocks=3))   # "a"'s agent comes back after 30 s
    assert ("a", "kept") not in forecaster._waiting or forecaster._waiting[("a", "kept")].depth == 1
    assert any(forecaster._stats.gap_stats(level).num_gaps > 0 for level in forecaster._stats.levels_of("a"))
