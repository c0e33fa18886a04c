"""The candidate rules of shards/route_slots.py, known answers: the KV rule (QA214 F1) in
the same shape as the slot rule."""
from __future__ import annotations

from cache.hashing import BlockHash
from shards.prefix_index import PrefixRun
from shards.route_records import RouteQuery, RouterConfig, WorkerCosts, WorkerLoad
from shards.route_slots import kv_candidates, slot_candidates

CONFIG = RouterConfig(block_size=16, num_hot_blocks=64, imbalance_threshold_tokens=2048.0)
LIVE = ["w0", "w1", "w2"]
PROBE = RouteQuery("ta", "probe", [BlockHash(i) for i in range(32)], 520)   # 33 blocks


def _loads(tenant="ta", loads=None, **streams):
    """w0..w2, each with its given number of `tenant`'s one-block streams, decoding."""
    loads = loads or {w: WorkerLoad() for w in LIVE}
    for worker, n in streams.items():
        for _ in range(n):
            loads[worker].add(tenant, 10, False)
            loads[worker].start_decode(tenant, 10, False, num_blocks=1)
    return loads


def _candidates(loads, query=PROBE, own=None, runs=None):
    costs = {w: WorkerCosts() for w in LIVE}
    runs = runs or {w: PrefixRun() for w in LIVE}
    live = slot_candidates(CONFIG, {}, LIVE, loads, costs, runs, query, own)
    return kv_candidates(CONFIG, {}, live, loads, costs, runs, query, own)


def test_the_home_worker_is_not_a_candidate_while_others_admit_at_once():
    assert _candidates(_loads(w0=6)) == ["w1", "w2"]
    assert _candidates(_loads(w0=6), own="w0",
                       runs={"w0": PrefixRun(32), "w1": PrefixRun(), "w2": PrefixRun()}) == ["w1", "w2"]


def test_a_short_step_still_fits_under_half():
    short = RouteQuery("ta", "probe", [], 25)   # 2 blocks: 6 + 2 <= 32
    assert _candidates(_loads(w0=6), short) == LIVE


def test_own_worker_stays_when_its_cached_prefix_saves_more_than_the_threshold():
    hashes = [BlockHash(i) for i in range(200)]
    query = RouteQuery("ta", "long", hashes, 200 * 16 + 10)   # 3,210 tokens, 3,200 cached on w0
    runs = {"w0": PrefixRun(200), "w1": PrefixRun(), "w2": PrefixRun()}
    assert _candidates(_loads(w0=6), query, own="w0", runs=runs) == LIVE
    assert _candidates(_loads(w0=6), query, own=None, runs=runs) == ["w1", "w2"]


def test_when_no_worker_admits_it_every_worker_stays_a_candidate():
    assert _candidates(_loads(w0=6, w1=6, w2=6)) == LIVE


def test_a_flex_request_is_held_to_its_tenants_pins():
    flex = RouteQuery("ta", None, [], 520, flex=True)
    assert _candidates(_loads(w0=6), flex) == ["w1", "w2"]


def test_the_slot_rule_still_applies_first():
    loads = _loads(w1=8)   # w1: ta holds every slot
    assert _candidates(loads, RouteQuery("ta", None, [], 10)) == ["w0", "w2"]


def test_a_tenants_overflow_never_spills_onto_other_tenants_workers():
    """bench_routing's burst: a bursting tenant's home held its next request back, and the
    others' workers took it (their p99 1.04 -> 1.6); only workers serving no other tenant
    take it, and with none, every worker stays a candidate, as before the KV rule."""
    assert _candidates(_loads(loads=_loads(w0=6), tenant="tb", w1=1)) == ["w2"]
    assert _candidates(_loads(loads=_loads(w0=6), tenant="tb", w1=1, w2=1)) == LIVE


def test_queued_requests_count_as_pinning_nothing():
    loads = {w: WorkerLoad() for w in LIVE}
    for _ in range(6):
        loads["w0"].add("ta", 10, False)   # routed, no first token yet: maybe still queued there
    assert _candidates(loads) == LIVE
