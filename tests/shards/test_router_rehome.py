"""Tenant homes rebalance after a worker comes back: new sessions of tenants piled on the
workers that stayed up move to it, a session already placed never does."""
from __future__ import annotations

from collections import Counter

from cache.events import BlockStored
from cache.hashing import BlockHash
from cache.tiers import Tier
from shards.route_records import RouteQuery, RouterConfig
from shards.router import Router

BLOCK = 16
WORKERS = ("w0", "w1", "w2")
TENANTS = [f"t{i}" for i in range(6)]


def _router(workers=WORKERS) -> Router:
    router = Router(RouterConfig(block_size=BLOCK))
    for worker in workers:
        router.add_worker(worker)
    return router


def _new_session(router: Router, tenant: str, name: str, hashes=()):
    """A new session's first request, routed and finished (its charge released)."""
    decision = router.route(f"r-{name}", RouteQuery(tenant, name, list(hashes), 200), router.workers(), 0.0)
    router.on_done(f"r-{name}")
    return decision


def _restart(router: Router, worker: str) -> dict[str, str]:
    """Fence `worker`, send each tenant a new session while it is down, add it back;
    where those sessions went."""
    router.remove_worker(worker)
    down = {t: _new_session(router, t, f"down-{t}").worker_id for t in TENANTS}
    router.add_worker(worker)
    return down


def test_homes_piled_on_the_survivors_of_a_restart_move_back_to_it_on_new_sessions():
    router = _router()
    first = {t: _new_session(router, t, f"first-{t}").worker_id for t in TENANTS}
    assert Counter(first.values()) == {"w0": 2, "w1": 2, "w2": 2}
    down = _restart(router, "w1")
    assert Counter(down.values()) == {"w0": 3, "w2": 3}   # w1's tenants re-homed on the survivors
    after = {t: _new_session(router, t, f"after-{t}") for t in TENANTS}
    assert Counter(d.worker_id for d in after.values()) == {"w0": 2, "w1": 2, "w2": 2}
    assert Counter(router.home(t) for t in TENANTS) == {"w0": 2, "w1": 2, "w2": 2}
    assert all(d.reason == "tenant" for d in after.values() if d.worker_id == "w1")
    assert router.stats.num_rehomed == 2
    # settled: more new sessions move nobody
    again = {t: _new_session(router, t, f"again-{t}").worker_id for t in TENANTS}
    assert again == {t: d.worker_id for t, d in after.items()} and router.stats.num_rehomed == 2


def test_a_moved_tenant_leaves_its_cached_prefix_behind_and_has_it_copied_when_that_is_cheaper():
    router = _router(("w0", "w1"))
    prefix = [BlockHash(100 + i) for i in range(8)]
    for tenant in ("a", "b", "c", "d"):
        _new_session(router, tenant, f"first-{tenant}")
    router.remove_worker("w1")
    for tenant in ("b", "d"):
        _new_session(router, tenant, f"down-{tenant}")   # homed on w0 now: 4 homes there, 0 on w1
    router.index.apply("w0", [BlockStored(tuple(prefix), Tier.HOT, "a")])   # a's system prompt, on w0
    router.add_worker("w1")
    for worker in ("w0", "w1"):   # as measured: a copy is dearer than its prefill until then
        costs = router.costs(worker)
        costs.prefill_s_per_token, costs.export_s_per_block, costs.import_s_per_block = 1e-3, 1e-5, 1e-5
    decision = _new_session(router, "a", "back-a", prefix)
    assert (decision.worker_id, decision.reason) == ("w1", "tenant")
    assert decision.transfer_from == "w0" and decision.num_transfer_blocks == 8


def test_a_live_session_keeps_its_worker_while_its_tenant_is_re_homed():
    router = _router()
    for tenant in TENANTS:
        _new_session(router, tenant, f"first-{tenant}")
    _restart(router, "w1")
    live = {t: router.session_worker(f"down-{t}") for t in TENANTS}
    for tenant in TENANTS:   # each live session's next step, before and after its tenant's new session
        step = router.route(f"r2-{tenant}", RouteQuery(tenant, f"down-{tenant}", [], 300), router.workers(), 0.0)
        router.on_done(f"r2-{tenant}")
        _new_session(router, tenant, f"new-{tenant}")
        step = router.route(f"r3-{tenant}", RouteQuery(tenant, f"down-{tenant}", [], 400), router.workers(), 0.0)
        router.on_done(f"r3-{tenant}")
        assert step.worker_id == live[tenant] and step.moved_from is None
    assert "w1" in {router.home(t) for t in TENANTS}


def test_homes_within_one_of_each_other_never_move():
    router = _router(("w0", "w1"))
    for tenant in ("a", "b", "c"):   # 2 homes on w0, 1 on w1
        _new_session(router, tenant, f"s1-{tenant}")
    homes = {t: router.home(t) for t in ("a", "b", "c")}
    for round_ in range(3):
        for tenant in ("a", "b", "c"):
            _new_session(router, tenant, f"s{round_ + 2}-{tenant}")
    assert {t: router.home(t) for t in ("a", "b", "c")} == homes
