"""Tenants share the tracer's limits fairly: one tenant's traffic never ends another's live
sessions while that one holds at most its share of `max_sessions`, and size retention
takes the biggest tenant's oldest sessions, not another tenant's."""
from __future__ import annotations

import pytest

from agents_trace.records import StepResult
from agents_trace.sessions import SessionTable
from agents_trace.store import TraceStore
from agents_trace.store_retention import biggest_first
from agents_trace.store_queries import SessionFilter, find_session, list_sessions

from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session, sessions_by_tenant


def _open(table: SessionTable, tenant: str, session: str, now_s: float) -> list[tuple[str, str]]:
    """Open a step of `session` (a header id); the (tenant, session) pairs evicted for it."""
    _, evicted = table.open_step(tenant, (session, "header"), [], [], now_s)
    return [(e.tenant, e.session) for e in evicted if e.reason == "evicted"]


def test_a_flood_past_max_sessions_evicts_only_the_flooding_tenants_own_sessions():
    """Known answer, cap 5: alpha holds 2 (within its share of 2.5), beta opens 8; beta's
    6th..8th each end beta's least recently active session, b0..b4, never alpha's."""
    table = SessionTable(idle_timeout_s=60, max_sessions=5)
    assert _open(table, "alpha", "a0", 1.0) == [] and _open(table, "alpha", "a1", 2.0) == []
    evicted = [pair for i in range(8) for pair in _open(table, "beta", f"b{i}", 10.0 + i)]
    assert evicted == [("beta", f"b{i}") for i in range(5)]
    assert table.num_live == 5
    assert table.get("alpha", "a0") is not None and table.get("alpha", "a1") is not None
    opened, evicted_now = table.open_step("alpha", ("a0", "header"), [], [], 20.0)
    assert (opened.session, opened.index, evicted_now) == ("a0", 1, [])


def test_when_the_cap_is_full_the_tenant_holding_the_most_loses_its_least_recent_first():
    """Known answer, cap 6: alpha 4 (over its share of 3), beta 2. beta's sessions are the
    oldest, yet a newcomer gamma takes room from alpha (4, then 3), then, with every
    tenant at 2, from itself (the opener loses ties)."""
    table = SessionTable(idle_timeout_s=60, max_sessions=6)
    for i in range(2):
        _open(table, "beta", f"b{i}", 1.0 + i)
    for i in range(4):
        _open(table, "alpha", f"a{i}", 10.0 + i)
    _open(table, "alpha", "a0", 30.0)   # a0 active again: a1 is alpha's least recent now
    assert _open(table, "gamma", "g0", 31.0) == [("alpha", "a1")]
    assert _open(table, "gamma", "g1", 32.0) == [("alpha", "a2")]
    assert _open(table, "gamma", "g2", 33.0) == [("gamma", "g0")]
    # beta, at 2 and the oldest, opens one: it is among those holding the most (2 each),
    # and as the opener it loses the tie: its own b0
    assert _open(table, "beta", "b2", 34.0) == [("beta", "b0")]
    assert table.num_live == 6


def test_the_tenant_that_reached_the_largest_count_first_loses_a_tie_a_newcomer_breaks():
    table = SessionTable(idle_timeout_s=60, max_sessions=4)
    _open(table, "alpha", "a0", 1.0)
    _open(table, "beta", "b0", 2.0)
    _open(table, "beta", "b1", 3.0)   # beta reaches 2 first
    _open(table, "alpha", "a1", 4.0)
    assert _open(table, "gamma", "g0", 5.0) == [("beta", "b0")]


def test_counts_follow_sessions_ended_idle_and_at_shutdown():
    """Sessions that expire leave their tenant's count: a tenant that shrank by expiry is
    not charged for sessions it no longer holds."""
    table = SessionTable(idle_timeout_s=10, max_sessions=4)
    for i in range(3):
        _open(table, "alpha", f"a{i}", 1.0 + i)
        table.close_step("alpha", f"a{i}", 0, 1.5 + i, request_digest=None, num_messages=1,
                         response_digest=None, asked={})
    _open(table, "beta", "b0", 20.0)
    assert {e.session for e in table.expire(20.0)} == {"a0", "a1", "a2"}
    for i in range(1, 4):
        assert _open(table, "beta", f"b{i}", 20.0 + i) == []
    _open(table, "alpha", "a9", 30.0)   # full: beta (4) loses, alpha (0 + the new one) does not
    assert table.get("beta", "b0") is None and table.get("alpha", "a9") is not None
    assert len(table.end_all()) == 4 and table.num_live == 0
    assert _open(table, "alpha", "x", 40.0) == []


def test_the_tracer_keeps_a_small_tenants_session_while_another_floods(tmp_path):
    """The audit's repro: max_sessions 5; beta's 8 new sessions leave alpha's open, and
    alpha's next step continues its session."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, max_sessions=5)
    try:
        run_scripted_session(tracer, clock, tenant="alpha", headers={"x-session-id": "mine"})
        for i in range(8):
            run_scripted_session(tracer, clock, tenant="beta")
        assert tracer.flush(5.0)
        [alpha] = find_session(tracer.store_path, "mine", "alpha")
        assert alpha["is_open"] is True and alpha["end_reason"] is None
        beta = list_sessions(tracer.store_path, SessionFilter(tenant="beta"), limit=100)["data"]
        assert sorted(s["end_reason"] or "open" for s in beta) == ["evicted"] * 4 + ["open"] * 4
        assert tracer.num_live_sessions == 5
        ctx = tracer.begin("alpha", {"x-session-id": "mine"}, {"model": "tiny", "messages": []})
        assert (ctx.session, ctx.index) == ("mine", 3)
        tracer.end(ctx, StepResult(num_input_tokens=1, num_output_tokens=1, finish_reason="stop"))
        assert tracer.num_live_sessions == 5
    finally:
        tracer.stop()


def test_size_retention_deletes_the_flooding_tenants_oldest_and_keeps_the_small_tenants(tmp_path):
    """The audit's repro: alpha stores 2 sessions, beta floods with 10 large ones; over the
    byte limit, beta's 7 oldest go (the excess, at the store's used bytes per counted byte,
    is 5.1 of beta's sessions: 6; then 1 more), alpha's 2 stay."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    try:
        for i in range(2):
            run_scripted_session(tracer, clock, tenant="alpha", headers={"x-session-id": f"a{i}"})
        for i in range(10):
            run_scripted_session(tracer, clock, tenant="beta", headers={"x-session-id": f"b{i}"},
                                 user_text="x" * 20_000)
        assert tracer.flush(5.0)
    finally:
        tracer.stop()
    store = TraceStore(tmp_path / "traces.sqlite3", max_age_s=10**9, max_bytes=10**9)
    store.open()
    try:
        store.max_bytes = store.used_bytes() // 2
        num_removed = store.apply_retention(clock.now_s)
        assert sessions_by_tenant(store.path) == {"alpha": ["a0", "a1"], "beta": ["b7", "b8", "b9"]}
        assert num_removed == 7 and store.used_bytes() <= store.max_bytes
    finally:
        store.close()


@pytest.fixture
def three_tenants(tmp_path):
    """alpha 4 sessions, beta 2, gamma 1, 3 steps each (12, 6 and 3 steps) holding a 20,000
    character message; gamma's the oldest, then beta's, then alpha's."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    try:
        for tenant, count in (("gamma", 1), ("beta", 2), ("alpha", 4)):
            for i in range(count):
                run_scripted_session(tracer, clock, tenant=tenant, user_text="x" * 20_000,
                                     headers={"x-session-id": f"{tenant[0]}{i}"})
        assert tracer.flush(5.0)
    finally:
        tracer.stop()
    store = TraceStore(tmp_path / "traces.sqlite3", max_age_s=10**9, max_bytes=10**9)
    store.open()
    yield store
    store.close()


def test_retention_takes_the_biggest_tenants_oldest_first_then_evens_out(three_tenants):
    """Known answer by bytes, each session set to count 1,000: alpha 4,000 -> 3,000 ->
    2,000, the tie at 2,000 goes by name (alpha), then beta 2,000 -> 1,000, then alpha,
    beta, gamma at 1,000 each."""
    store = three_tenants
    store.db.execute("UPDATE sessions SET num_bytes = 1000")
    heap = [(-4000, "alpha"), (-2000, "beta"), (-1000, "gamma")]
    first = biggest_first(store.db, heap, 5)
    assert first == [("alpha", "a0"), ("alpha", "a1"), ("alpha", "a2"), ("beta", "b0"), ("alpha", "a3")]
    assert sorted(heap) == [(-1000, "beta"), (-1000, "gamma")]
    store._delete_sessions(first)
    assert biggest_first(store.db, heap, 8, num_bytes=1000) == [("beta", "b1")]   # 1,000 bytes: enough
    assert heap == [(-1000, "gamma")]


def test_retention_just_over_the_limit_takes_one_session_of_the_biggest_tenant(three_tenants):
    """gamma's session is the oldest, but alpha stores the most: its oldest goes, alone."""
    store = three_tenants
    store.max_bytes = store.used_bytes() - 1
    num_removed = store.apply_retention(1e9)
    assert sessions_by_tenant(store.path) == {"alpha": ["a1", "a2", "a3"], "beta": ["b0", "b1"], "gamma": ["g0"]}
    assert num_removed == 1 and store.used_bytes() <= store.max_bytes


def test_retention_keeps_the_age_limit_for_every_tenant(three_tenants):
    """Age retention is unchanged: whoever's, a session past `max_age_s` goes."""
    store = three_tenants
    gamma_last_s = find_session(store.path, "g0", "gamma")[0]["last_s"]
    store.max_age_s = 1e9 - gamma_last_s - 0.001   # only gamma's session is that old
    assert store.apply_retention(1e9) == 1
    assert "gamma" not in sessions_by_tenant(store.path)
