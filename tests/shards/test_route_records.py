"""The router's per-worker records: the KV blocks `WorkerLoad` mirrors for the worker's KV
admission rule (QA214 F1), counted as the worker counts them and released exactly."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from shards.fair_queue import pinned_blocks
from shards.route_records import RouterConfig, WorkerLoad
from shards.worker import WorkerLoop

CONFIG = RouterConfig(block_size=16, num_hot_blocks=64)


@pytest.mark.parametrize("num_tokens", [1, 15, 16, 17, 520, 521, 2021])
def test_pinned_blocks_counts_as_the_worker_does(num_tokens):
    worker = SimpleNamespace(config=SimpleNamespace(block_size=16))
    item = SimpleNamespace(prompt_token_ids=[7] * num_tokens)
    assert pinned_blocks(num_tokens, 16) == WorkerLoop._num_blocks(worker, item)


def test_pinned_blocks_known_answers():
    assert [pinned_blocks(n, 16) for n in (0, 15, 16, 512, 521)] == [1, 1, 2, 33, 33]


def test_add_start_decode_release_restore_zero():
    """Blocks count from a request's first token (surely admitted), until its end."""
    load = WorkerLoad()
    load.add("ta", 100, False)
    load.add("ta", 30, False)
    load.add("ta", 50, True)
    load.add("tb", 10, False)
    assert load.pinned_blocks == {}   # routed, maybe still queued there: counted as pinning nothing
    load.start_decode("ta", 100, False, num_blocks=7)
    load.start_decode("ta", 50, True, num_blocks=4)    # flex: counted under its tenant, as the worker does
    load.start_decode("tb", 10, False, num_blocks=1)
    assert load.pinned_blocks == {"ta": 11, "tb": 1}
    load.release("ta", 100, False, True, num_blocks=7)
    load.release("ta", 50, True, True, num_blocks=4)
    assert load.pinned_blocks == {"tb": 1}
    load.release("tb", 10, False, True, num_blocks=1)
    load.release("ta", 30, False, False, num_blocks=2)   # ended before its first token: pinned nothing here
    assert load == WorkerLoad()


def test_serves_other_tenants():
    load = WorkerLoad()
    load.add("ta", 10, False)
    assert not load.serves_other_tenants("ta") and load.serves_other_tenants("tb")
    load.add("tb", 10, True)   # a flex request, once it decodes
    load.start_decode("tb", 10, True, num_blocks=1)
    assert load.serves_other_tenants("ta")


def _qa214_load(num_streams=6):
    load = WorkerLoad()
    for _ in range(num_streams):   # the tenant's streams, one block each, decoding
        load.add("ta", 10, False)
        load.start_decode("ta", 10, False, num_blocks=1)
    return load


def test_a_tenant_alone_past_half_the_hot_blocks_waits_for_kv():
    load = _qa214_load()
    assert load.waits_for_kv(CONFIG, {}, "ta", 33)       # 6 + 33 > 64 // 2, ta alone
    assert not load.waits_for_kv(CONFIG, {}, "ta", 26)   # 6 + 26 = 32: within half
    assert not WorkerLoad().waits_for_kv(CONFIG, {}, "ta", 33)   # pinning none: always admitted
    assert not load.waits_for_kv(CONFIG, {}, "tb", 33)   # another tenant pins none here


def test_kv_wait_within_the_tenants_share_when_another_tenant_pins():
    load = _qa214_load()
    load.add("tb", 10, False)
    load.start_decode("tb", 10, False, num_blocks=1)
    assert not load.waits_for_kv(CONFIG, {}, "ta", 26)   # 6 + 26 <= 64 / 2 (ta's share)
    assert load.waits_for_kv(CONFIG, {}, "ta", 27)
    assert not load.waits_for_kv(CONFIG, {"ta": 3.0}, "ta", 42)   # weight 3 of 4: share 48


def test_no_kv_rule_without_the_hot_capacity():
    assert not _qa214_load().waits_for_kv(RouterConfig(block_size=16), {}, "ta", 33)
