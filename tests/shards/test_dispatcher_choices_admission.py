"""A request of several runs (`n` choices, the later ones submitted once the first
streams) is admitted or refused as a unit by the engine queue's bounds."""
from __future__ import annotations

from shards.dispatcher import DispatchConfig, Dispatcher
from shards.fair_queue import PushResult
from shards.protocol import ErrorEvent, SamplingParams, TokenEvent, WorkItem
from shards.route_records import RouterConfig
from shards.router import Router
from shards.tiered_queue import TieredQueue


def _dispatcher(workers=("w0",), **config) -> Dispatcher:
    dispatcher = Dispatcher(Router(RouterConfig(block_size=16)), DispatchConfig(**config))
    for worker in workers:
        dispatcher.add_worker(worker, None, 0.0)
    return dispatcher


def _item(request_id, tenant="t", flex=False):
    return WorkItem(request_id, tenant, list(range(40)), SamplingParams(max_tokens=4), flex=flex)


def _refusals(out):
    return [e.code for e in out.deliveries if isinstance(e, ErrorEvent)]


def test_the_later_choices_of_a_streaming_request_are_queued_past_a_full_tenant_queue():
    dispatcher = _dispatcher(max_queued_per_tenant=4, max_outstanding_per_worker=1, max_outstanding_hard=1)
    assert _refusals(dispatcher.submit(_item("a-0"), [], 0.0, room=3)) == []   # sent: the worker had room
    dispatcher.on_worker_message("w0", TokenEvent("a-0", [1], "x", worker_id="w0"), 0.1)
    for index in range(4):   # the tenant's other requests fill its queue meanwhile
        assert _refusals(dispatcher.submit(_item(f"b{index}"), [], 0.2)) == []
    assert _refusals(dispatcher.submit(_item("c-0"), [], 0.3)) == ["rate_limit_exceeded"]
    for choice in (1, 2):   # a-0's choices, started once it streamed: part of an admitted request
        assert _refusals(dispatcher.submit(_item(f"a-{choice}"), [], 0.3, room=0)) == []
    assert dispatcher.queue.num_queued("t") == 6 and "a-2" in dispatcher.requests


def test_a_first_choice_is_refused_before_it_starts_unless_its_request_has_room_for_all_its_choices():
    dispatcher = _dispatcher(workers=(), max_queued_per_tenant=4)
    dispatcher.submit(_item("b0"), [], 0.0)
    dispatcher.submit(_item("b1"), [], 0.0)
    assert _refusals(dispatcher.submit(_item("a-0"), [], 0.1, room=3)) == ["rate_limit_exceeded"]
    assert "a-0" not in dispatcher.requests and dispatcher.queue.num_queued("t") == 2
    assert _refusals(dispatcher.submit(_item("c-0"), [], 0.1, room=2)) == []
    assert dispatcher.stats.num_rejected == {"rate_limit_exceeded": 1}


def test_the_engine_wide_bound_admits_a_request_as_a_unit_too():
    dispatcher = _dispatcher(workers=(), max_queued_requests=4)
    dispatcher.submit(_item("b0", tenant="u"), [], 0.0)
    assert _refusals(dispatcher.submit(_item("a-0"), [], 0.1, room=4)) == ["overloaded"]
    assert _refusals(dispatcher.submit(_item("a-0"), [], 0.1, room=3)) == []
    assert _refusals(dispatcher.submit(_item("a-1"), [], 0.2, room=0)) == []
    assert len(dispatcher.queue) == 3


def test_tiered_queue_room_counts_against_each_bound_and_a_request_larger_than_a_bound_fits_an_empty_one():
    queue = TieredQueue(max_per_tenant=4, max_total=6)
    assert queue.push("a", "big-0", "big-0", 1.0, room=9) is PushResult.ADMITTED   # asks at most the whole bound
    assert queue.push("a", "x-0", "x-0", 1.0, room=4) is PushResult.TENANT_FULL
    assert queue.push("a", "x-0", "x-0", 1.0, room=3) is PushResult.ADMITTED
    assert queue.push("b", "y-0", "y-0", 1.0, room=5) is PushResult.QUEUE_FULL
    for index in range(1, 6):
        assert queue.push("a", f"big-{index}", f"big-{index}", 1.0, room=0) is PushResult.ADMITTED
    assert queue.num_queued("a") == 7 and queue.push("a", "z", "z", 1.0) is PushResult.QUEUE_FULL


def test_tiered_queue_room_for_flex_requests_counts_against_their_half_of_the_bounds():
    queue = TieredQueue(max_per_tenant=4)
    assert queue.push("a", "f0", "f0", 1.0, flex=True, room=2) is PushResult.ADMITTED
    assert queue.push("a", "f1", "f1", 1.0, flex=True, room=2) is PushResult.TENANT_FULL
    assert queue.push("a", "f1", "f1", 1.0, flex=True, room=1) is PushResult.ADMITTED
    assert queue.push("a", "f2", "f2", 1.0, flex=True, room=0) is PushResult.ADMITTED
    assert queue.push("a", "d0", "d0", 1.0, room=2) is PushResult.TENANT_FULL
