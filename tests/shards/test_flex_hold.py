"""The flex hold: workers pause their flex work while a default-tier request is being
prefilled anywhere, and are told only when that changes."""
from __future__ import annotations

from shards.dispatcher import DispatchConfig, Dispatcher
from shards.flex_hold import FlexHoldSwitch
from shards.protocol import FinishEvent, HoldFlex, SamplingParams, TokenEvent, WorkItem
from shards.route_records import RouterConfig
from shards.router import Router


def test_the_switch_tells_each_worker_once_per_change_and_a_returning_worker_afresh():
    switch = FlexHoldSwitch()
    assert switch.sends(0, ["w0", "w1"]) == []   # unheld, as they start
    assert switch.sends(2, ["w0", "w1"]) == [("w0", HoldFlex(True)), ("w1", HoldFlex(True))]
    assert switch.sends(1, ["w0", "w1"]) == []
    switch.forget("w1")   # restarted: it starts unheld
    assert switch.sends(1, ["w0", "w1"]) == [("w1", HoldFlex(True))]
    assert switch.sends(0, ["w0", "w1"]) == [("w0", HoldFlex(False)), ("w1", HoldFlex(False))]
    assert FlexHoldSwitch(enabled=False).sends(5, ["w0"]) == []


def _item(request_id: str, flex: bool = False) -> WorkItem:
    return WorkItem(request_id, "t", list(range(40)), SamplingParams(max_tokens=4), flex=flex)


def test_the_dispatcher_holds_flex_work_from_a_default_requests_routing_to_its_first_token():
    dispatcher = Dispatcher(Router(RouterConfig(block_size=16)), DispatchConfig())
    for worker in ("w0", "w1"):
        dispatcher.add_worker(worker, None, 0.0)
    dispatcher.submit(_item("batch", flex=True), [], 0.0)
    assert dispatcher.flex_hold_sends() == []   # flex work alone holds nothing
    out = dispatcher.submit(_item("agent"), [], 0.0)
    [worker] = [w for w, m in out.sends if isinstance(m, WorkItem) and m.request_id == "agent"]
    assert dispatcher.flex_hold_sends() == [("w0", HoldFlex(True)), ("w1", HoldFlex(True))]
    dispatcher.on_worker_message(worker, TokenEvent("agent", [5], "x"), 0.1)
    assert dispatcher.flex_hold_sends() == [("w0", HoldFlex(False)), ("w1", HoldFlex(False))]
    dispatcher.submit(_item("agent2"), [], 0.2)
    assert len(dispatcher.flex_hold_sends()) == 2
    worker2 = dispatcher.requests["agent2"].worker_id
    dispatcher.on_worker_message(worker2, FinishEvent("agent2", "stop", 40, 0, 0, 0.0, worker2), 0.3)
    assert dispatcher.flex_hold_sends() == [("w0", HoldFlex(False)), ("w1", HoldFlex(False))]   # ended unstarted
    assert dispatcher.router.num_default_prefills == 0
    off = Dispatcher(Router(RouterConfig(block_size=16)), DispatchConfig(flex_hold=False))
    off.add_worker("w0", None, 0.0)
    off.submit(_item("agent"), [], 0.0)
    assert off.flex_hold_sends() == [] and off.router.num_default_prefills == 1
