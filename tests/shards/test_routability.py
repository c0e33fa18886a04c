"""FI11: which workers a request may go to now (fresh, quiet, not routable), as the
supervisor judges them and as the dispatcher uses them: "no worker now" is a wait, not an error."""
from __future__ import annotations

from shards.dispatcher import DispatchConfig, Dispatcher
from shards.protocol import SamplingParams, TokenEvent, WorkItem
from shards.routability import Routability, quiet_after_s, usable_workers
from shards.route_records import RouterConfig
from shards.router import Router
from shards.supervisor import Supervisor, SupervisorConfig


def test_supervisor_routability_is_fresh_then_quiet_after_two_pings_then_none_past_the_timeout():
    supervisor = Supervisor(SupervisorConfig(ping_interval_s=0.5, health_timeout_s=2.0))
    supervisor.on_spawned("w0", 0, 0.0)
    assert supervisor.routability("w0", 0.0) is Routability.NONE   # starting
    assert supervisor.on_ready("w0", 0, 0.0)
    assert supervisor.routability("w0", 1.0) is Routability.FRESH   # one ping missed at most
    assert supervisor.routability("w0", 1.25) is Routability.QUIET
    assert supervisor.routability("w0", 2.25) is Routability.NONE   # past the health timeout
    supervisor.on_heard("w0", 0, 2.0)
    assert supervisor.routability("w0", 2.25) is Routability.FRESH
    supervisor.fence("w0", 2.25, "exited")
    assert supervisor.routability("w0", 2.25) is Routability.NONE


def test_quiet_never_comes_later_than_the_health_timeout():
    assert quiet_after_s(0.5, 30.0) == 15.0 and quiet_after_s(0.5, 0.8) == 0.8 and quiet_after_s(0.3, 1.0) == 0.6


def test_usable_workers_are_the_fresh_else_the_quiet_never_the_unroutable():
    ranks = {"a": Routability.QUIET, "b": Routability.FRESH, "c": Routability.NONE, "d": True, "e": False}
    routable = ranks.__getitem__
    assert usable_workers(["a", "b", "c", "d", "e"], lambda w, now: routable(w), 0.0) == ["b", "d"]
    assert usable_workers(["a", "c", "e"], lambda w, now: routable(w), 0.0) == ["a"]
    assert usable_workers(["c", "e"], lambda w, now: routable(w), 0.0) == []
    assert usable_workers(["c", "e"], None, 0.0) == ["c", "e"]


def test_dispatcher_keeps_a_request_queued_while_no_worker_is_routable_and_sends_it_when_one_is():
    """The old dispatcher needed an answer from the router (it crashed on None), so the router
    fell back to a worker being fenced: now "no worker now" leaves the request queued."""
    ranks = {"w0": Routability.NONE, "w1": Routability.NONE}
    dispatcher = Dispatcher(Router(RouterConfig(block_size=16), routable=lambda w, now: ranks[w]), DispatchConfig())
    for worker in ("w0", "w1"):
        dispatcher.add_worker(worker, None, 0.0)
    item = WorkItem("r1", "t", list(range(40)), SamplingParams(max_tokens=4))
    out = dispatcher.submit(item, [], 0.0)
    assert out.sends == [] and out.deliveries == [] and "r1" in dispatcher.queue
    ranks["w1"] = Routability.FRESH
    out = dispatcher.pump(0.5)
    assert [(w, m.request_id) for w, m in out.sends] == [("w1", "r1")] and len(dispatcher.queue) == 0


def test_dispatcher_requeue_restarts_the_queue_wait_and_an_expired_stream_is_not_retryable():
    ranks = {"w0": Routability.FRESH}
    dispatcher = Dispatcher(Router(RouterConfig(block_size=16), routable=lambda w, now: ranks[w]),
                            DispatchConfig(max_queue_wait_s=10.0))
    dispatcher.add_worker("w0", None, 0.0)
    dispatcher.submit(WorkItem("r1", "t", list(range(40)), SamplingParams(max_tokens=400)), [], 0.0)
    dispatcher.on_worker_message("w0", TokenEvent("r1", [5], "a", worker_id="w0"), 1.0)
    ranks["w0"] = Routability.NONE
    dispatcher.remove_worker("w0", 50.0)   # 50 s into the stream, no worker left
    assert dispatcher.expire(55.0).deliveries == [] and "r1" in dispatcher.queue
    (error,) = dispatcher.expire(60.5).deliveries
    assert error.code == "overloaded" and not error.retryable


def test_supervisor_an_exit_settles_after_exit_settle_s_or_once_the_worker_restarts():
    supervisor = Supervisor(SupervisorConfig(exit_settle_s=0.2, restart_delay_s=0.5))
    supervisor.on_spawned("w0", 0, 0.0)
    assert supervisor.on_ready("w0", 0, 0.0)
    assert not supervisor.settled("w0", 5.0)   # ready
    assert supervisor.on_exit("w0", 0, 1.0, "killed by SIGKILL")
    assert not supervisor.settled("w0", 1.1) and supervisor.settled("w0", 1.25)
    supervisor.on_spawned("w0", 1, 1.5)
    assert supervisor.settled("w0", 1.5)   # restarting: its old incarnation's requests must go on
    assert supervisor.on_ready("w0", 1, 2.0) and not supervisor.settled("w0", 2.0)
