"""Request bookkeeping without processes: admission, retries, fairness, transfers."""
from __future__ import annotations

import dataclasses

from cache.events import BlockStored
from cache.hashing import BlockHash
from cache.tiers import Tier
from shards.dispatcher import DispatchConfig, Dispatcher
from shards.protocol import (CacheEventsReport, CancelRequest, CostProfile, ErrorEvent, FinishEvent, SamplingParams,
                             SessionMoved, TokenEvent, WorkItem)
from shards.transfer_messages import ExportPrefix, ImportPrefix, PrefixExported
from shards.route_records import RouterConfig
from shards.router import Router

BLOCK = 16
COSTS = CostProfile(prefill_s_per_token=20e-6, export_s_per_block=10e-6, import_s_per_block=10e-6)


def _dispatcher(workers=("w0", "w1"), costs=None, **config) -> Dispatcher:
    dispatcher = Dispatcher(Router(RouterConfig(block_size=BLOCK, imbalance_threshold_tokens=50.0)),
                            DispatchConfig(**config))
    for worker in workers:
        dispatcher.add_worker(worker, costs, 0.0)
    return dispatcher


def _item(request_id, tenant="t", num_tokens=40, session=None):
    return WorkItem(request_id, tenant, list(range(num_tokens)), SamplingParams(max_tokens=4), session)


def _finish(request_id, worker):
    return FinishEvent(request_id, "length", 40, 0, 4, 0.01, worker)


def _sent_items(out):
    return [(w, m.request_id) for w, m in out.sends if isinstance(m, WorkItem)]


def test_dispatcher_sends_at_once_while_workers_have_room():
    dispatcher = _dispatcher()
    out = dispatcher.submit(_item("r1"), [], 0.0)
    assert _sent_items(out) == [("w0", "r1")] and out.deliveries == []


def test_dispatcher_requeues_a_tokenless_request_of_a_dead_worker_elsewhere():
    dispatcher = _dispatcher()
    dispatcher.submit(_item("r1"), [], 0.0)
    out = dispatcher.remove_worker("w0", 1.0)
    assert _sent_items(out) == [("w1", "r1")] and out.deliveries == []
    assert dispatcher.stats.num_retried == 1
    out = dispatcher.remove_worker("w1", 2.0)  # second death: no attempts left
    assert isinstance(out.deliveries[0], ErrorEvent) and out.deliveries[0].code == "worker_died"
    assert out.deliveries[0].retryable


def test_dispatcher_resumes_a_streaming_request_of_a_dead_worker_from_its_last_token():
    dispatcher = _dispatcher()
    dispatcher.submit(_item("r1"), [], 0.0)
    dispatcher.on_worker_message("w0", TokenEvent("r1", [5], "x"), 0.1)
    dispatcher.on_worker_message("w0", TokenEvent("r1", [6, 7], "yz"), 0.2)
    out = dispatcher.remove_worker("w0", 1.0)
    assert out.deliveries == [] and dispatcher.stats.num_resumed == 1
    [(worker, item)] = [(w, m) for w, m in out.sends if isinstance(m, WorkItem)]
    assert worker == "w1" and item.request_id == "r1"
    assert item.prompt_token_ids == list(range(40)) + [5, 6, 7]   # the prompt, then what was sent
    assert (item.num_resumed_tokens, item.num_resumed_chars, item.num_prompt_tokens) == (3, 3, 40)
    assert item.sampling.max_tokens == 4   # counted from the start: the resumed tokens are output
    dispatcher.on_worker_message("w1", TokenEvent("r1", [8], "!"), 1.1)
    dispatcher.add_worker("w0", None, 1.2)
    out = dispatcher.remove_worker("w1", 2.0)   # a second death: no attempts left
    (event,) = out.deliveries
    assert event.code == "worker_died" and not event.retryable
    assert "r1" not in dispatcher.requests


def test_a_resumed_requests_prefill_time_is_not_taken_for_its_workers_prompt_cost():
    dispatcher = _dispatcher(costs=COSTS)
    dispatcher.submit(_item("r1", num_tokens=200), [], 0.0)
    dispatcher.on_worker_message("w0", TokenEvent("r1", [5], "x"), 0.1)
    dispatcher.remove_worker("w0", 1.0)
    before = dispatcher.router.costs("w1").prefill_s_per_token
    dispatcher.on_worker_message("w1", FinishEvent("r1", "length", 200, 0, 4, 0.5, "w1", prefill_s=2.0), 1.5)
    assert "r1" not in dispatcher.requests
    assert dispatcher.router.costs("w1").prefill_s_per_token == before
    dispatcher.submit(_item("r2", num_tokens=200), [], 2.0)   # a request's own prefill counts
    dispatcher.on_worker_message("w1", FinishEvent("r2", "length", 200, 0, 4, 0.5, "w1", prefill_s=2.0), 2.5)
    assert dispatcher.router.costs("w1").prefill_s_per_token > before


def test_a_resumed_requests_finish_reports_the_cached_prompt_tokens_its_first_worker_found():
    """The client waited on the first worker's prefill: usage's cached tokens are that
    worker's, not those of the worker that prefilled prompt and output to go on."""
    dispatcher = _dispatcher()
    dispatcher.submit(_item("r1"), [], 0.0)
    dispatcher.on_worker_message("w0", TokenEvent("r1", [5], "x", num_cached_tokens=32), 0.1)
    dispatcher.on_worker_message("w0", TokenEvent("r1", [6], "y"), 0.2)
    dispatcher.remove_worker("w0", 1.0)
    dispatcher.on_worker_message("w1", TokenEvent("r1", [7], "z", num_cached_tokens=0), 1.1)
    out = dispatcher.on_worker_message("w1", FinishEvent("r1", "length", 40, 0, 4, 0.5, "w1"), 1.2)
    (finish,) = out.deliveries
    assert finish.num_cached_tokens == 32 and finish.worker_id == "w1" and finish.num_output_tokens == 4
    dispatcher.submit(_item("r2"), [], 2.0)   # not resumed: its own worker's finish as it is
    dispatcher.on_worker_message("w1", TokenEvent("r2", [5], "x", num_cached_tokens=16), 2.1)
    (finish,) = dispatcher.on_worker_message("w1", FinishEvent("r2", "length", 40, 16, 4, 0.5, "w1"), 2.2).deliveries
    assert finish.num_cached_tokens == 16


def test_dispatcher_resumes_a_request_twice_from_all_it_sent():
    dispatcher = _dispatcher(max_attempts=3)
    dispatcher.submit(_item("r1"), [], 0.0)
    dispatcher.on_worker_message("w0", TokenEvent("r1", [5], "x"), 0.1)
    dispatcher.remove_worker("w0", 1.0)
    dispatcher.on_worker_message("w1", TokenEvent("r1", [6], "y"), 1.1)
    dispatcher.add_worker("w0", None, 1.2)
    out = dispatcher.remove_worker("w1", 2.0)
    [item] = [m for _, m in out.sends if isinstance(m, WorkItem)]
    assert item.prompt_token_ids == list(range(40)) + [5, 6] and item.num_resumed_tokens == 2


def test_dispatcher_resumes_a_streaming_request_with_log_probabilities_too():
    """Each sent token's log probabilities went out with it: the resumed request asks the
    next worker for those of the tokens still to come, not again for the prompt's."""
    dispatcher = _dispatcher()
    item = _item("r1")
    sampling = SamplingParams(max_tokens=4, logprobs=2, prompt_logprobs=2)
    dispatcher.submit(WorkItem("r1", "t", item.prompt_token_ids, sampling), [], 0.0)
    dispatcher.on_worker_message("w0", TokenEvent("r1", [5], "x"), 0.1)
    out = dispatcher.remove_worker("w0", 1.0)
    assert out.deliveries == [] and dispatcher.stats.num_resumed == 1
    [(worker, resumed)] = [(w, m) for w, m in out.sends if isinstance(m, WorkItem)]
    assert worker == "w1" and resumed.num_resumed_tokens == 1
    assert (resumed.sampling.logprobs, resumed.sampling.prompt_logprobs) == (2, None)


def test_dispatcher_ignores_events_from_a_worker_not_serving_the_request():
    dispatcher = _dispatcher()
    dispatcher.submit(_item("r1"), [], 0.0)
    assert dispatcher.on_worker_message("w1", _finish("r1", "w1"), 0.1).deliveries == []
    assert dispatcher.on_worker_message("w0", _finish("r1", "w0"), 0.1).deliveries


def test_dispatcher_refuses_past_bounds_with_429_and_503_codes():
    dispatcher = _dispatcher(workers=(), max_queued_per_tenant=2, max_queued_requests=3)
    for i in range(2):
        assert dispatcher.submit(_item(f"a{i}", "a"), [], 0.0).deliveries == []
    (refused,) = dispatcher.submit(_item("a9", "a"), [], 0.0).deliveries
    assert (refused.code, refused.retryable, refused.retry_after_s) == ("rate_limit_exceeded", True, 1.0)
    dispatcher.submit(_item("b0", "b"), [], 0.0)
    (full,) = dispatcher.submit(_item("c0", "c"), [], 0.0).deliveries
    assert full.code == "overloaded"


def test_dispatcher_holds_requests_past_the_worker_limit_and_pumps_on_finish():
    dispatcher = _dispatcher(workers=("w0",), max_outstanding_per_worker=1, max_outstanding_hard=1)
    assert _sent_items(dispatcher.submit(_item("r1"), [], 0.0)) == [("w0", "r1")]
    assert _sent_items(dispatcher.submit(_item("r2"), [], 0.0)) == []
    out = dispatcher.on_worker_message("w0", _finish("r1", "w0"), 0.1)
    assert _sent_items(out) == [("w0", "r2")]


def test_dispatcher_serves_a_quiet_tenant_before_a_noisy_backlog():
    dispatcher = _dispatcher(workers=("w0",), max_outstanding_per_worker=1, max_outstanding_hard=2)
    for i in range(5):
        dispatcher.submit(_item(f"n{i}", "noisy"), [], 0.0)
    out = dispatcher.submit(_item("q0", "quiet"), [], 0.0)
    # the worker is at its soft limit, but "quiet" holds less than its share
    assert _sent_items(out) == [("w0", "q0")]


def test_dispatcher_counts_only_the_tenants_with_requests_out():
    """A thousand tenants served one request each leave no count behind: what `can_take`
    sums before each send is the tenants with requests out, not every tenant ever served."""
    dispatcher = _dispatcher(workers=("w0",))
    for i in range(1000):
        dispatcher.submit(_item(f"r{i}", f"t{i}"), [], float(i))
        dispatcher.on_worker_message("w0", _finish(f"r{i}", "w0"), float(i) + 0.5)
    dispatcher.submit(_item("live", "t7"), [], 2000.0)
    assert list(dispatcher._ready) == ["w0"] and dispatcher._ready.by_tenant("w0") == {"t7": 1}
    dispatcher.cancel("live")
    assert dispatcher._ready.by_tenant("w0") == {}


def test_dispatcher_expires_requests_queued_too_long():
    dispatcher = _dispatcher(workers=(), max_queue_wait_s=5.0)
    dispatcher.submit(_item("r1"), [], 0.0)
    assert dispatcher.expire(4.0).deliveries == []
    (event,) = dispatcher.expire(6.0).deliveries
    assert event.code == "overloaded" and not dispatcher.requests


def test_dispatcher_cancel_tells_the_worker_and_releases_the_charge():
    dispatcher = _dispatcher()
    dispatcher.submit(_item("r1"), [], 0.0)
    out = dispatcher.cancel("r1")
    assert out.sends == [("w0", CancelRequest("r1"))]
    assert dispatcher.router.load("w0").num_outstanding == 0


def test_dispatcher_applies_cache_events_to_the_index():
    dispatcher = _dispatcher()
    dispatcher.on_worker_message("w1", CacheEventsReport("w1", [BlockStored((BlockHash(7),), Tier.HOT, "t")]), 0.0)
    assert dispatcher.router.index.workers_holding(BlockHash(7)) == {"w1": Tier.HOT}


def _transfer_setup(costs=COSTS, **config):
    dispatcher = _dispatcher(costs=costs, **config)
    hashes = [BlockHash(100 + i) for i in range(4)]
    dispatcher.on_worker_message("w1", CacheEventsReport("w1", [BlockStored(tuple(hashes), Tier.HOT, "t")]), 0.0)
    for worker in ("w0", "w1"):
        dispatcher.set_round_trip(worker, 1e-4)
    dispatcher.submit(_item("busy", num_tokens=200), [], 0.0)  # w0 gets it...
    dispatcher.submit(_item("busy2", num_tokens=400), [], 0.0)  # ...and w1 this bigger one
    out = dispatcher.submit(_item("r1", num_tokens=70), hashes, 0.0)
    return dispatcher, out


def test_dispatcher_transfer_exports_then_imports_before_the_request():
    dispatcher, out = _transfer_setup()
    ((src, export),) = out.sends
    assert src == "w1" and isinstance(export, ExportPrefix) and export.max_blocks == 4
    out = dispatcher.on_worker_message("w1", PrefixExported("w1", export.transfer_id, "seg", 4, 0.001), 0.1)
    (dst1, imp), (dst2, item) = out.sends
    assert (dst1, dst2) == ("w0", "w0") and isinstance(imp, ImportPrefix) and item.request_id == "r1"
    assert imp.token_ids == tuple(range(64)) and imp.shm_name == "seg"


def test_dispatcher_copies_only_the_blocks_past_those_the_destination_holds():
    dispatcher = _dispatcher(costs=COSTS)
    hashes = [BlockHash(100 + i) for i in range(4)]
    dispatcher.on_worker_message("w1", CacheEventsReport("w1", [BlockStored(tuple(hashes), Tier.HOT, "t")]), 0.0)
    dispatcher.on_worker_message("w0", CacheEventsReport("w0", [BlockStored(tuple(hashes[:1]), Tier.HOT, "t")]), 0.0)
    for worker in ("w0", "w1"):
        dispatcher.set_round_trip(worker, 1e-4)
    dispatcher.submit(_item("busy", num_tokens=200), [], 0.0)
    dispatcher.submit(_item("busy2", num_tokens=400), [], 0.0)
    ((src, export),) = dispatcher.submit(_item("r1", num_tokens=70), hashes, 0.0).sends
    assert src == "w1" and (export.first_block, export.max_blocks) == (1, 4)
    out = dispatcher.on_worker_message(
        "w1", PrefixExported("w1", export.transfer_id, "seg", 3, 0.001, first_block=1), 0.1)
    (dst1, imp), (dst2, item) = out.sends
    assert (dst1, dst2) == ("w0", "w0") and item.request_id == "r1"
    assert (imp.first_block, imp.num_blocks, imp.token_ids) == (1, 3, tuple(range(64)))


def test_dispatcher_tells_the_old_worker_after_its_export_when_a_session_moves():
    dispatcher = _dispatcher(costs=COSTS, max_outstanding_per_worker=1, max_outstanding_hard=1)
    for worker in ("w0", "w1"):
        dispatcher.set_round_trip(worker, 1e-4)
    hashes = [BlockHash(100 + i) for i in range(4)]
    assert _sent_items(dispatcher.submit(_item("s1", num_tokens=70, session="s"), hashes, 0.0)) == [("w0", "s1")]
    dispatcher.on_worker_message("w0", _finish("s1", "w0"), 0.1)
    dispatcher.on_worker_message("w0", CacheEventsReport("w0", [BlockStored(tuple(hashes), Tier.HOT, "t")]), 0.1)
    out = dispatcher.submit(_item("s2", num_tokens=70, session="s"), hashes, 0.2)
    assert [(w, type(m)) for w, m in out.sends] == [("w0", WorkItem)]  # stays with its KV
    dispatcher.on_worker_message("w0", _finish("s2", "w0"), 0.3)
    dispatcher.submit(_item("busy"), [], 0.4)  # w0 is now at its limit
    out = dispatcher.submit(_item("s3", num_tokens=70, session="s"), hashes, 0.5)
    (src, export), (old, moved) = out.sends
    assert (src, old) == ("w0", "w0") and isinstance(export, ExportPrefix)
    assert moved == SessionMoved("t", "s") and dispatcher.router.session_worker("s") == "w1"


def test_dispatcher_inline_transfer_carries_the_bytes_from_export_to_import():
    dispatcher, out = _transfer_setup(inline_transfers=True)
    ((src, export),) = out.sends
    assert src == "w1" and export.inline is True
    out = dispatcher.on_worker_message(
        "w1", PrefixExported("w1", export.transfer_id, None, 4, 0.001, payload=b"kv" * 8), 0.1)
    (dst1, imp), (dst2, item) = out.sends
    assert (dst1, dst2) == ("w0", "w0") and item.request_id == "r1"
    assert isinstance(imp, ImportPrefix) and imp.payload == b"kv" * 8 and imp.shm_name is None
    assert out.unlink == [] and dispatcher.stats.num_transfers_done == 1


def test_dispatcher_inline_export_with_nothing_cached_sends_the_request_alone():
    dispatcher, out = _transfer_setup(inline_transfers=True)
    export = out.sends[0][1]
    out = dispatcher.on_worker_message("w1", PrefixExported("w1", export.transfer_id, None, 0, 0.001), 0.1)
    assert [type(m).__name__ for _, m in out.sends] == ["WorkItem"]


def test_dispatcher_unlinks_a_late_export_after_cancel_and_sends_on_after_timeout():
    dispatcher, out = _transfer_setup()
    export = out.sends[0][1]
    dispatcher.cancel("r1")
    late = dispatcher.on_worker_message("w1", PrefixExported("w1", export.transfer_id, "seg", 4, 0.0), 0.1)
    assert late.unlink == ["seg"] and late.sends == []
    dispatcher, out = _transfer_setup()
    timed_out = dispatcher.expire(5.0)
    assert _sent_items(timed_out) == [("w0", "r1")]


def test_a_copy_is_waited_for_as_long_as_the_recompute_it_spares_and_at_least_the_timeout():
    dispatcher, _ = _transfer_setup()   # 4 blocks of 16 tokens at 20 us a token: 1.3 ms to recompute
    assert _sent_items(dispatcher.expire(0.99)) == []
    assert _sent_items(dispatcher.expire(1.01)) == [("w0", "r1")]   # the 1 s floor
    slow = CostProfile(prefill_s_per_token=0.05, export_s_per_block=0.01, import_s_per_block=0.01)
    dispatcher, out = _transfer_setup(costs=slow)
    assert isinstance(out.sends[0][1], ExportPrefix)   # 3.2 s of recompute spared by a copy
    assert _sent_items(dispatcher.expire(3.1)) == []
    assert _sent_items(dispatcher.expire(3.3)) == [("w0", "r1")]
    assert dispatcher.stats.num_transfers_abandoned == 1


def test_dispatcher_source_death_mid_transfer_sends_the_request_without_it():
    dispatcher, out = _transfer_setup()
    out = dispatcher.remove_worker("w1", 0.2)
    assert ("w0", "r1") in _sent_items(out)


def test_dispatcher_sends_a_held_default_request_before_flex_ones_queued_earlier():
    dispatcher = _dispatcher(workers=("w0",), max_outstanding_per_worker=1, max_outstanding_hard=1)
    assert _sent_items(dispatcher.submit(_item("r1"), [], 0.0)) == [("w0", "r1")]
    for i in range(2):
        dispatcher.submit(dataclasses.replace(_item(f"batch{i}", "batch"), flex=True), [], 0.0)
    dispatcher.submit(_item("agent", "agent"), [], 0.1)
    sent = []
    for finished in ("r1", "agent", "batch0"):
        sent += _sent_items(dispatcher.on_worker_message("w0", _finish(finished, "w0"), 0.2))
    assert sent == [("w0", "agent"), ("w0", "batch0"), ("w0", "batch1")]
