"""A request is not placed where it must wait for a slot while another worker has a free one
(QA161 finding 1): the tenant-home rule, the prefix score and session affinity included."""
from __future__ import annotations

from cache.events import BlockStored
from cache.hashing import BlockHash
from cache.tiers import Tier
from shards.route_records import RouteQuery, RouterConfig
from shards.router import Router

BLOCK = 16
SYSTEM = [BlockHash(1000 + i) for i in range(70)]   # a 1,120-token warm system prompt
WORKERS = ["w0", "w1"]


def _router(**overrides) -> Router:
    router = Router(RouterConfig(block_size=BLOCK, slots_per_worker=8, **overrides))
    for worker in WORKERS:
        router.add_worker(worker)
    return router


def _store(router, worker, hashes, tenant="t"):
    router.index.apply(worker, [BlockStored(tuple(hashes), Tier.HOT, tenant)])


def _new_session(i, tenant="t", hashes=SYSTEM, num_tokens=1200):
    return RouteQuery(tenant, f"{tenant}-s{i}", hashes, num_tokens)


def _burst(router, n, tenant="t"):
    return [router.route(f"{tenant}-r{i}", _new_session(i, tenant), WORKERS, 0.0).worker_id for i in range(n)]


def test_a_burst_of_10_new_sessions_does_not_queue_on_the_home_worker():
    router = _router()
    assert router.home("t") == "w0"
    _store(router, "w0", SYSTEM)
    placed = _burst(router, 10)
    assert placed.count("w0") == 8 and placed.count("w1") == 2
    assert placed[:8] == ["w0"] * 8   # home and prefix hold while w0 has slots


def test_a_burst_of_16_new_sessions_splits_8_8():
    router = _router()
    router.home("t")
    _store(router, "w0", SYSTEM)
    placed = _burst(router, 16)
    assert placed.count("w0") == 8 and placed.count("w1") == 8


def test_requests_started_decoding_still_hold_their_slots():
    router = _router()
    router.home("t")
    _store(router, "w0", SYSTEM)
    for i in range(8):
        router.route(f"r{i}", _new_session(i), WORKERS, 0.0)
        router.on_first_token(f"r{i}")   # decoding: no prefill load left, the slot still held
    assert router.route("r8", _new_session(8), WORKERS, 0.0).worker_id == "w1"
    router.on_done("r0")                 # a slot frees on w0: home and prefix win again
    assert router.route("r9", _new_session(9), WORKERS, 0.0).worker_id == "w0"


def test_when_every_worker_is_full_the_old_pricing_decides():
    """Both workers full (8 each): the slot-wait price and the prefix decide as before
    (the same placements as the code before this rule)."""
    router = _router()
    router.home("t")
    _store(router, "w0", SYSTEM)
    for worker in WORKERS:
        for i in range(8):
            router.route(f"{worker}-fill{i}", _new_session(f"{worker}{i}"), [worker], 0.0)
    placed = [router.route(f"r{i}", _new_session(i), WORKERS, 0.0).worker_id for i in range(4)]
    assert placed == ["w0"] * 4   # home and prefix, within the gate: unchanged


def test_a_session_leaves_its_full_worker_unless_its_prefix_there_is_large():
    router = _router()
    small = [BlockHash(5000 + i) for i in range(8)]    # 128 tokens of its own KV on w1
    large = [BlockHash(6000 + i) for i in range(256)]  # 4,096 tokens of its own KV on w1
    for name, hashes in (("small", small), ("large", large)):
        _store(router, "w1", hashes)
        first = router.route(f"{name}-0", RouteQuery("u", name, hashes[:1], 16), ["w1"], 0.0)
        assert first.worker_id == "w1"
        router.on_done(f"{name}-0")
    for i in range(8):   # the tenant's other requests fill w1's slots
        router.route(f"fill{i}", RouteQuery("u", None, [], 10), ["w1"], 0.0)
    moved = router.route("small-1", RouteQuery("u", "small", small, len(small) * BLOCK + 20), WORKERS, 0.0)
    assert (moved.worker_id, moved.moved_from) == ("w0", "w1")
    kept = router.route("large-1", RouteQuery("u", "large", large, len(large) * BLOCK + 20), WORKERS, 0.0)
    assert (kept.worker_id, kept.moved_from) == ("w1", None)   # 4,096 saved there, 0 on w0: stays


def test_another_tenant_within_its_share_is_not_pushed_off_its_home():
    """The worker admits a tenant below its share of the slots past the soft limit: such a
    request does not wait there, so its home keeps it."""
    router = _router()
    assert router.home("t") == "w0" and router.home("u") == "w1"
    _store(router, "w1", SYSTEM, tenant="u")
    for i in range(7):
        router.route(f"fill{i}", RouteQuery("t", None, [], 10), ["w1"], 0.0)
    router.route("u-0", _new_session(0, "u"), WORKERS, 0.0)   # w1 holds 8 now, 1 of them u's
    assert router.route("u-1", _new_session(1, "u"), WORKERS, 0.0).worker_id == "w1"
