"""A request is not routed where the worker's KV rule would hold it back while another
worker would start it (QA214 F1: a tenant's 520-token agent step waited 17 s on its home
worker behind six of its own streams while two workers sat idle; 64 hot blocks)."""
from __future__ import annotations

from cache.events import BlockStored
from cache.hashing import BlockHash
from cache.tiers import Tier
from shards.route_records import RouteQuery, RouterConfig
from shards.router import Router

BLOCK = 16
WORKERS = ["w0", "w1", "w2"]
PROBE = [BlockHash(3000 + i) for i in range(32)]   # the probe session's 512 cached tokens


def _router(num_hot_blocks=64) -> Router:
    router = Router(RouterConfig(block_size=BLOCK, slots_per_worker=8, num_hot_blocks=num_hot_blocks))
    for worker in WORKERS:
        router.add_worker(worker)
    return router


def _qa214(router):
    """The probe's first step on ta's home w0, then six streams of ta's there."""
    assert router.route("probe-1", RouteQuery("ta", "probe", PROBE[:1], 20), WORKERS, 0.0).worker_id == "w0"
    router.on_done("probe-1")
    router.index.apply("w0", [BlockStored(tuple(PROBE), Tier.HOT, "ta")])
    streams = [router.route(f"s{i}", RouteQuery("ta", f"stream{i}", [], 10), WORKERS, 0.0) for i in range(6)]
    assert [d.worker_id for d in streams] == ["w0"] * 6
    for i in range(6):
        router.on_first_token(f"s{i}")


def test_the_next_step_leaves_the_home_worker_whose_kv_rule_holds_it():
    router = _router()
    _qa214(router)
    step = router.route("probe-2", RouteQuery("ta", "probe", PROBE, 521), WORKERS, 0.0)
    assert (step.worker_id, step.moved_from) == ("w1", "w0")


def test_with_room_for_it_the_session_stays():
    router = _router(num_hot_blocks=4096)
    _qa214(router)
    assert router.route("probe-2", RouteQuery("ta", "probe", PROBE, 521), WORKERS, 0.0).worker_id == "w0"


def test_released_streams_release_their_blocks():
    router = _router()
    _qa214(router)
    for i in range(6):
        router.on_done(f"s{i}")
    assert all(router.load(w).pinned_blocks == {} for w in WORKERS)
    assert router.route("probe-2", RouteQuery("ta", "probe", PROBE, 521), WORKERS, 0.0).worker_id == "w0"
