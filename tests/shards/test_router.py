"""The routing decision as a pure object: prefix, load, the imbalance gate, affinity."""
from __future__ import annotations

from cache.events import BlockStored
from cache.hashing import BlockHash
from cache.tiers import Tier
from shards.route_records import RouterConfig, RouteQuery
from shards.routability import Routability
from shards.router import RESERVATION_SWEEP_MIN, Router

BLOCK = 16
PREFIX = [BlockHash(100 + i) for i in range(8)]  # a 128-token shared prefix


def _router(**overrides) -> Router:
    router = Router(RouterConfig(block_size=BLOCK, **overrides))
    for worker in ("w0", "w1"):
        router.add_worker(worker)
    return router


def _query(session=None, num_blocks=8, num_tokens=200):
    return RouteQuery("t", session, PREFIX[:num_blocks], num_tokens)


def _store(router, worker, hashes):
    router.index.apply(worker, [BlockStored(tuple(hashes), Tier.HOT, "t")])


def test_router_sends_a_request_to_the_worker_holding_its_prefix():
    router = _router()
    _store(router, "w1", PREFIX)
    decision = router.route("r1", _query(), ["w0", "w1"], 0.0)
    assert decision.worker_id == "w1" and decision.reason == "prefix"
    assert decision.num_expected_cached_tokens == 128 and decision.num_prefill_tokens == 72


def test_router_without_any_prefix_picks_the_least_loaded_then_lowest_id():
    router = _router(tenant_homes=False)
    first = router.route("r1", _query(), ["w0", "w1"], 0.0)
    second = router.route("r2", _query(), ["w0", "w1"], 0.0)
    assert (first.worker_id, first.reason) == ("w0", "least_loaded")
    assert second.worker_id == "w1"  # the first one's charge counted at once


def test_router_burst_spreads_once_load_outweighs_the_cached_prefix():
    router = _router(tenant_homes=False)
    _store(router, "w0", PREFIX)
    chosen = [router.route(f"r{i}", _query(), ["w0", "w1"], 0.0).worker_id for i in range(6)]
    # each w0 request charges 72 prefill tokens; w1 would prefill 200: w0 takes the
    # first ones, then the charged load tips the burst over to w1
    assert chosen[0] == "w0" and "w1" in chosen
    assert chosen.count("w0") >= 2


def test_router_tenants_get_homes_on_the_worker_with_fewest_tenants():
    router = _router()
    homes = {t: router.route(f"r-{t}", RouteQuery(t, f"s-{t}", [], 100), ["w0", "w1"], 0.0).worker_id
             for t in ("a", "b", "c", "d")}
    assert homes == {"a": "w0", "b": "w1", "c": "w0", "d": "w1"}
    assert router.home("a") == "w0" and router.home("b") == "w1"


def test_router_new_sessions_go_home_until_the_imbalance_gate_then_spill():
    router = _router(imbalance_threshold_tokens=500.0)
    router.home("t")  # t's home: w0
    placed = [router.route(f"r{i}", _query(f"s{i}"), ["w0", "w1"], 0.0).worker_id for i in range(5)]
    # 200 tokens each: w0 takes them while its load exceeds w1's by at most 500 tokens
    assert placed == ["w0", "w0", "w0", "w1", "w0"]
    assert router.stats.num_routed["tenant"] == 3  # the first went home as least loaded


def test_router_home_yields_to_a_worker_holding_more_of_the_prompt():
    router = _router()
    assert router.home("t") == "w0"
    _store(router, "w1", PREFIX)  # e.g. a conversation without a session id, continued
    decision = router.route("r1", _query(), ["w0", "w1"], 0.0)
    assert (decision.worker_id, decision.reason) == ("w1", "prefix")


def test_router_home_moves_when_its_worker_is_removed():
    router = _router()
    assert router.home("t") == "w0"
    router.remove_worker("w0")
    assert router.home("t") == "w1"


def test_router_homes_stay_balanced_across_a_worker_restart():
    """Homes are handed out by a running count per worker: a worker removed and added
    back (a restart keeps its id) starts again from none, and the next tenants go there."""
    router = _router()
    assert [router.home(f"t{i}") for i in range(6)] == ["w0", "w1"] * 3
    router.remove_worker("w1")
    assert [router.home(f"t{i}") for i in (1, 3)] == ["w0", "w0"]   # moved
    router.add_worker("w1")
    # w0 is home to t0-t4 now: w1 takes the next five, then they alternate again
    assert [router.home(f"n{i}") for i in range(7)] == ["w1"] * 5 + ["w0", "w1"]


def test_router_imbalance_gate_falls_back_to_the_least_loaded_worker():
    router = _router(imbalance_threshold_tokens=50.0)
    _store(router, "w0", PREFIX)
    router.route("big", RouteQuery("t", None, [], 100), ["w0"], 0.0)  # loads w0 by 100 tokens
    # by score w0 still wins (saves 128, loaded 100), but its load is past the gate
    decision = router.route("r1", _query(), ["w0", "w1"], 0.0)
    assert (decision.worker_id, decision.reason) == ("w1", "imbalance")


def test_router_session_stays_on_its_worker_unless_overloaded_or_gone():
    router = _router(affinity_slack_tokens=64.0)
    assert router.route("r1", _query("s"), ["w0", "w1"], 0.0).worker_id == "w0"
    router.on_done("r1")
    _store(router, "w0", PREFIX[:4])  # the session's KV so far: 64 tokens on w0...
    _store(router, "w1", PREFIX[:6])  # ...a little more on w1, within the slack
    decision = router.route("r2", _query("s"), ["w0", "w1"], 0.0)
    assert (decision.worker_id, decision.reason) == ("w0", "affinity")
    router.on_done("r2")
    router.route("big", RouteQuery("t", None, [], 300), ["w0"], 0.0)  # w0 overloaded
    assert router.route("r3", _query("s"), ["w0", "w1"], 0.0).worker_id == "w1"
    assert router.route("r4", _query("s"), ["w0"], 0.0).worker_id == "w0"
    assert router.route("r5", _query("s"), ["w1"], 0.0).worker_id == "w1"  # gone: moves


def test_router_reports_a_session_leaving_its_worker_once_per_move():
    router = _router()
    first = router.route("r1", _query("s"), ["w0", "w1"], 0.0)
    assert (first.worker_id, first.moved_from) == ("w0", None)  # a new session moves nowhere
    router.on_done("r1")
    assert router.route("r2", _query("s"), ["w0", "w1"], 0.0).moved_from is None  # stays
    router.on_done("r2")
    moved = router.route("r3", _query("s"), ["w1"], 0.0)  # w0 at its dispatch limit
    assert (moved.worker_id, moved.moved_from) == ("w1", "w0")
    router.on_done("r3")
    assert router.route("r4", _query("s"), ["w1"], 0.0).moved_from is None  # settled on w1
    assert router.route("other", _query(None), ["w0"], 0.0).moved_from is None  # no session
    assert router.stats.num_session_moves == 1
    router.remove_worker("w1")
    assert router.route("r5", _query("s"), ["w0"], 0.0).moved_from is None  # w1 is gone


def test_router_counts_requests_waiting_for_a_slot_as_load():
    router = _router(slots_per_worker=1, slot_wait_tokens=500.0, decode_cost_tokens=0.0)
    router.route("a", RouteQuery("t", None, [], 10), ["w0"], 0.0)
    router.route("b", RouteQuery("t", None, [], 10), ["w0"], 0.0)
    assert router.load_tokens("w0") == 20 + 500


def test_router_reservation_holds_the_session_worker_until_it_expires():
    router = _router()
    router.route("r1", _query("s"), ["w0", "w1"], 0.0)
    router.on_done("r1")
    assert router.reserve("s", until_s=10.0, now_s=0.0) == "w0"
    assert router.reserve("unknown", until_s=10.0, now_s=0.0) is None
    _store(router, "w1", PREFIX)
    assert router.route("r2", _query("s"), ["w0", "w1"], 5.0).reason == "reserved"
    assert router.num_reserved(11.0) == 0


def test_router_reservations_of_sessions_that_never_return_do_not_pile_up():
    router = _router(max_sessions=3000)
    for i in range(5000):
        router.route(f"r{i}", _query(f"s{i}"), ["w0", "w1"], float(i))
        router.on_done(f"r{i}")
        router.reserve(f"s{i}", until_s=i + 10.0, now_s=float(i))   # none of them comes back
    assert len(router._reserved) <= RESERVATION_SWEEP_MIN + 1   # the expired ones were swept
    assert router.num_reserved(4999.0) == 11   # s4989..s4999 (until 4999 and later)
    assert router.route("again", _query("s4995"), ["w0", "w1"], 4999.0).reason == "reserved"
    capped = _router(max_sessions=50)
    for i in range(200):
        capped.route(f"r{i}", _query(f"s{i}"), ["w0", "w1"], 0.0)
        capped.on_done(f"r{i}")
        capped.reserve(f"s{i}", until_s=1e9, now_s=0.0)   # none expires
    assert len(capped._reserved) == 50 and capped.num_reserved(1.0) == 50


def test_router_charges_move_to_decode_and_are_released_exactly_once():
    router = _router(decode_cost_tokens=10.0)
    router.route("r1", _query(), ["w0"], 0.0)
    assert router.load_tokens("w0") == 200
    router.on_first_token("r1")
    router.on_first_token("r1")
    assert router.load_tokens("w0") == 10
    router.on_done("r1")
    router.on_done("r1")
    load = router.load("w0")
    assert (load.num_queued_prefill_tokens, load.num_active_decodes, load.num_outstanding) == (0, 0, 0)


def test_router_remove_worker_forgets_its_charges_sessions_and_blocks():
    router = _router()
    _store(router, "w0", PREFIX)
    router.route("r1", _query("s"), ["w0", "w1"], 0.0)
    router.remove_worker("w0")
    assert router.workers() == ["w1"] and router.index.num_blocks("w0") == 0
    assert router.session_worker("s") is None and router.worker_of("r1") is None
    assert router.route("r2", _query("s"), ["w0", "w1"], 0.0).worker_id == "w1"


def _costed(router, prefill_s_per_token, copy_s_per_block):
    for worker in router.workers():
        costs = router.costs(worker)
        costs.prefill_s_per_token = prefill_s_per_token
        costs.export_s_per_block = costs.import_s_per_block = copy_s_per_block / 2
        costs.round_trip_s = 0.001


def test_router_proposes_a_transfer_only_when_copying_is_measured_cheaper():
    router = _router(imbalance_threshold_tokens=10.0)
    _store(router, "w1", PREFIX)
    router.route("busy", RouteQuery("t", None, [], 400), ["w1"], 0.0)  # the gate sends to w0
    _costed(router, prefill_s_per_token=20e-6, copy_s_per_block=30e-6)
    cheap = router.route("r1", _query(), ["w0", "w1"], 0.0)
    assert (cheap.worker_id, cheap.transfer_from, cheap.num_transfer_blocks) == ("w0", "w1", 8)
    assert cheap.num_expected_cached_tokens == 128
    router.on_done("r1")
    _costed(router, prefill_s_per_token=1e-6, copy_s_per_block=30e-6)  # recompute is cheaper
    dear = router.route("r2", _query(), ["w0", "w1"], 0.0)
    assert dear.worker_id == "w0" and dear.transfer_from is None


def test_router_never_transfers_when_disabled():
    router = _router(imbalance_threshold_tokens=10.0, can_transfer=False)
    _store(router, "w1", PREFIX)
    router.route("busy", RouteQuery("t", None, [], 400), ["w1"], 0.0)
    _costed(router, prefill_s_per_token=20e-6, copy_s_per_block=30e-6)
    assert router.route("r1", _query(), ["w0", "w1"], 0.0).transfer_from is None


def test_router_baselines_ignore_prefixes_and_sessions():
    rr = _router(policy="round_robin")
    _store(rr, "w1", PREFIX)
    chosen = [rr.route(f"r{i}", _query("s"), ["w0", "w1"], 0.0).worker_id for i in range(4)]
    assert chosen == ["w0", "w1", "w0", "w1"]
    ll = _router(policy="least_loaded")
    _store(ll, "w1", PREFIX)
    first = ll.route("a", _query("s"), ["w0", "w1"], 0.0)
    second = ll.route("b", _query("s"), ["w0", "w1"], 0.0)
    assert (first.worker_id, second.worker_id) == ("w0", "w1")
    assert first.num_expected_cached_tokens == 0 and first.transfer_from is None


def test_router_another_tenants_backlog_does_not_push_a_session_off_its_kv():
    router = _router()
    _store(router, "w0", PREFIX)
    for i in range(6):  # a noisy tenant queues 6 x 2000 prefill tokens on w0
        router.route(f"n{i}", RouteQuery("noisy", None, [], 2000), ["w0"], 0.0)
    assert router.load_tokens("w0") > 10_000
    assert router.load_tokens("w0", "t") == 0  # t's request would be scheduled first
    decision = router.route("r1", _query("s"), ["w0", "w1"], 0.0)
    assert decision.worker_id == "w0" and decision.num_expected_cached_tokens == 128
    assert router.load_tokens("w0", "noisy") > 10_000


def _flex_query(session=None, num_tokens=200, tenant="t"):
    return RouteQuery(tenant, session, [], num_tokens, flex=True)


def test_router_flex_requests_skip_the_tenant_home_and_spread_by_load():
    """A tenant's batch work does not pile onto its home worker (where its agents'
    sessions go): each flex request goes to the least loaded worker."""
    router = _router()
    assert router.route("agent", _query(session="s1", num_blocks=0), ["w0", "w1"], 0.0).worker_id == "w0"
    router.on_done("agent")   # both workers idle again: a tie, which goes away from the tenant's home
    chosen = [router.route(f"f{i}", _flex_query(), ["w0", "w1"], 0.0) for i in range(3)]
    assert [d.worker_id for d in chosen] == ["w1", "w0", "w1"] and {d.reason for d in chosen} == {"flex"}
    router.on_first_token("f0")   # w1 decodes a flex request: load to the agents' requests
    home = router.route("agent2", _query(session="s2", num_blocks=0), ["w0", "w1"], 0.0)
    assert (home.worker_id, home.reason) == ("w0", "least_loaded")   # the agents' sessions stay home
    router.route("agent3", _query(session="s3", num_blocks=0), ["w0", "w1"], 0.0)
    assert router.session_worker("s3") == "w0"   # home, though w0 now has more to do
    assert router.stats.num_routed == {"least_loaded": 2, "flex": 3, "tenant": 1}


def test_router_flex_prefill_is_not_load_to_a_default_request_but_is_to_the_totals():
    router = _router(tenant_homes=False, decode_cost_tokens=10.0)
    router.route("f1", _flex_query(num_tokens=1000), ["w0"], 0.0)
    assert router.load_tokens("w0", "t") == 0 and router.load_tokens("w0") == 1000
    assert router.route("d1", _query(num_blocks=0), ["w0", "w1"], 0.0).worker_id == "w0"   # w0 first: a tie
    router.on_first_token("f1")   # its decodes are load to everyone
    assert router.load_tokens("w0", "t") == 210 and router.load_tokens("w1", "t") == 0


def test_router_flex_request_leaves_no_session_behind_and_its_charge_is_released_exactly_once():
    router = _router(decode_cost_tokens=10.0)
    router.route("f1", _flex_query(session="s-batch"), ["w0"], 0.0)
    assert router.session_worker("s-batch") is None and router.load("w0").by_tenant == {}
    router.on_first_token("f1")
    router.on_first_token("f1")
    router.on_done("f1")
    router.on_done("f1")
    load = router.load("w0")
    assert (load.num_queued_prefill_tokens, load.num_flex_prefill_tokens, load.num_active_decodes,
            load.num_outstanding) == (0, 0, 0, 0)


def test_router_never_chooses_a_candidate_that_is_not_routable():
    """A worker the engine is fencing (or found dead) is still a candidate until the
    dispatcher drops it: it wins no tie, holds no prefix that counts, and is never chosen,
    even when every candidate is like it (FI11: then no decision, the request waits)."""
    fencing = {"w0"}
    router = Router(RouterConfig(block_size=BLOCK), routable=lambda worker, now_s: worker not in fencing)
    for worker in ("w0", "w1", "w2"):
        router.add_worker(worker)
    _store(router, "w0", PREFIX)   # the prefix, and the tie-break, both favour w0
    decision = router.route("r1", _query(), ["w0", "w1", "w2"], 0.0)
    assert decision.worker_id == "w1" and decision.num_expected_cached_tokens == 0
    fencing.update({"w1", "w2"})
    assert router.route("r2", _query(), ["w1", "w2"], 0.0) is None
    assert router.worker_of("r2") is None and router.load("w2").num_outstanding == 0   # nothing charged


def test_router_never_copies_a_prefix_from_a_worker_that_is_not_routable():
    fencing = {"w1"}
    router = Router(RouterConfig(block_size=BLOCK, imbalance_threshold_tokens=10.0),
                    routable=lambda worker, now_s: worker not in fencing)
    for worker in ("w0", "w1"):
        router.add_worker(worker)
    _store(router, "w1", PREFIX)
    _costed(router, prefill_s_per_token=20e-6, copy_s_per_block=30e-6)
    decision = router.route("r1", _query(), ["w0"], 0.0)   # w1 at its dispatch limit, and being fenced
    assert decision.worker_id == "w0" and decision.transfer_from is None
    fencing.clear()
    assert router.route("r2", _query(), ["w0"], 0.0).transfer_from == "w1"   # as a healthy holder is


def test_router_never_chooses_a_worker_that_is_not_routable_even_when_it_is_the_only_candidate():
    """QA85: the healthy worker at its dispatch limit is no candidate; the others are being
    fenced: the router has no answer (the old fallback sent the request to a dead worker)."""
    router = Router(RouterConfig(block_size=BLOCK), routable=lambda worker, now_s: Routability.NONE)
    router.add_worker("w1")
    assert router.route("r1", _query(), ["w1"], 0.0) is None and router.usable(["w1"], 0.0) == []


def test_router_prefers_fresh_workers_to_quiet_ones_while_any_is_fresh():
    """A worker that missed its last pings (QUIET) loses to a FRESH one even when it holds
    the prefix, has the lower load and is the tenant's home; it is neither copied from; when
    every candidate is QUIET they are all usable again."""
    ranks = {"w0": Routability.QUIET, "w1": Routability.FRESH, "w2": Routability.NONE}
    router = Router(RouterConfig(block_size=BLOCK, imbalance_threshold_tokens=1e9),
                    routable=lambda worker, now_s: ranks[worker])
    for worker in ("w0", "w1", "w2"):
        router.add_worker(worker)
    _store(router, "w0", PREFIX)
    _costed(router, prefill_s_per_token=20e-6, copy_s_per_block=30e-6)
    router.route("busy", _query(), ["w1"], 0.0)   # w1 carries more load than w0
    assert router.usable(["w0", "w1", "w2"], 0.0) == ["w1"]
    decision = router.route("r1", _query(), ["w0", "w1", "w2"], 0.0)
    assert decision.worker_id == "w1" and decision.transfer_from is None
    ranks["w1"] = Routability.QUIET
    assert router.usable(["w0", "w1", "w2"], 0.0) == ["w0", "w1"]
    assert router.route("r2", _query(), ["w0", "w1", "w2"], 0.0).worker_id == "w0"
