"""FI11 (QA85): a request never goes to a worker that is not routable, nor to one that
missed its last pings while a fresh one is there; with no worker now it waits in the queue
(its queue-wait bound still applies) and goes on when one can take it. On an engine with fake
channels (no processes), deterministic times."""
from __future__ import annotations

import time

from shards.engine import LocalEngine
from shards.protocol import ErrorEvent, FinishEvent, SamplingParams, TokenEvent, WorkItem
from tests.shards.test_engine_fences import FakeChannel


def _engine(*, health_timeout_s: float, ping_interval_s: float = 0.5, max_running: int = 8,
            max_queue_wait_s: float = 120.0) -> LocalEngine:
    engine = LocalEngine("tiny", 3, health_timeout_s=health_timeout_s, ping_interval_s=ping_interval_s,
                         prefix_transfer=False, max_running=max_running, max_queue_wait_s=max_queue_wait_s)
    engine.t0 = time.monotonic()
    engine._supervise_task = object()   # "after the start": fences are told to the operator
    engine.delivered = []
    engine._deliver = engine.delivered.extend
    return engine


def _add(engine, worker_id, now, incarnation=0):
    engine._channels[worker_id] = FakeChannel()
    engine._supervisor.on_spawned(worker_id, incarnation, now)
    assert engine._supervisor.on_ready(worker_id, incarnation, now)
    with engine._lock:
        engine._perform(engine._dispatcher.add_worker(worker_id, None, now))


def _submit(engine, request_id, now):
    item = WorkItem(request_id, "t", list(range(40)), SamplingParams(max_tokens=100))
    with engine._lock:
        engine._perform(engine._dispatcher.submit(item, [], now))


def _stream(engine, request_id, worker_id, now):
    """The request's worker sends two tokens."""
    with engine._lock:
        engine._perform(engine._dispatcher.on_worker_message(
            worker_id, TokenEvent(request_id, [5, 6], "ab", worker_id=worker_id), now))


def _resumed_on(engine, worker_id):
    return [m.request_id for m in engine._channels[worker_id].sent
            if isinstance(m, WorkItem) and m.num_resumed_tokens]


def _full_healthy_worker():
    """QA85's repro: w0 healthy and at its dispatch limit (2, max_running 1), r1 streaming on w1."""
    engine = _engine(health_timeout_s=5.0, max_running=1)
    t0 = engine.t0
    _add(engine, "w0", t0)
    _submit(engine, "a", t0)
    _submit(engine, "b", t0)
    _add(engine, "w1", t0)
    _submit(engine, "r1", t0)
    _add(engine, "w2", t0)
    _stream(engine, "r1", "w1", t0)
    assert engine._channels["w0"].items() == ["a", "b"] and engine._channels["w1"].items() == ["r1"]
    return engine


def test_a_cut_stream_waits_for_the_full_healthy_worker_instead_of_another_fenced_one():
    engine = _full_healthy_worker()
    t0 = engine.t0
    engine._supervisor.on_heard("w0", 0, t0 + 5.5)   # w0 healthy; w1 and w2 silent
    plan, lines = engine._supervise_tick(t0 + 6)
    assert [worker_id for worker_id, _ in plan.fence] == ["w1", "w2"]
    assert engine._channels["w2"].items() == []   # the old fallback sent r1 here
    assert "r1" in engine._dispatcher.queue and engine._dispatcher.stats.num_failed_worker_died == 0
    # each fence line counts what became of that worker's own requests (QA85 LOW 4)
    assert "1 request(s) cut mid-reply go on" in lines[0] and "failed" not in lines[0]
    assert lines[1].startswith("worker w2") and "request" not in lines[1]
    with engine._lock:   # w0 finishes one: r1 goes on there, from its last token
        engine._perform(engine._dispatcher.on_worker_message(
            "w0", FinishEvent("a", "length", 40, 0, 4, 0.01, "w0"), t0 + 6.1))
    assert _resumed_on(engine, "w0") == ["r1"] and engine._dispatcher.requests["r1"].worker_id == "w0"


def test_a_worker_dead_before_its_exit_is_handled_gets_no_request_while_the_healthy_one_is_full():
    engine = _full_healthy_worker()
    engine._channels["w1"].alive = engine._channels["w2"].alive = False   # both SIGKILLed
    engine._on_exit("w1", 0, "killed by SIGKILL")
    engine._supervise_tick(engine.t0 + 1)   # w1's exit settled; w2's not handled yet
    assert engine._channels["w2"].items() == [] and "r1" in engine._dispatcher.queue
    engine._on_exit("w2", 0, "killed by SIGKILL")
    engine._supervise_tick(engine.t0 + 2)
    assert engine._dispatcher.stats.num_failed_worker_died == 0 and "r1" in engine._dispatcher.queue


def test_workers_killed_together_are_all_seen_gone_before_a_cut_stream_goes_on():
    """QA85 MEDIUM 3, live: one SIGKILL to every worker; w0's exit is handled while the
    readers of w1 and w2 have not reached their pipes' end. Its stream does not go on at once
    (it went to w1, found dead a moment later, and failed): it goes on once the exit settled,
    when every channel shows dead, so it waits for the first restarted worker."""
    engine = _engine(health_timeout_s=5.0)
    t0 = engine.t0
    for worker_id in ("w0", "w1", "w2"):
        _add(engine, worker_id, t0)
    _submit(engine, "r1", t0)
    _stream(engine, "r1", "w0", t0)
    engine._channels["w0"].alive = False
    engine._on_exit("w0", 0, "killed by SIGKILL")
    assert engine._channels["w1"].items() == [] and engine._dispatcher.requests["r1"].worker_id == "w0"
    engine._channels["w1"].alive = engine._channels["w2"].alive = False   # their readers catch up
    plan, lines = engine._supervise_tick(t0 + 1)
    assert engine._channels["w1"].items() == [] and engine._channels["w2"].items() == []
    assert "r1" in engine._dispatcher.queue and engine._dispatcher.stats.num_failed_worker_died == 0
    assert lines == ["worker w0 killed by SIGKILL: 1 request(s) cut mid-reply go on from their last token "
                     "when a worker serves again; restarting it in 0.2 s"]   # w1, w2 dead too (QA199 F9)
    for worker_id in ("w1", "w2"):
        engine._on_exit(worker_id, 0, "killed by SIGKILL")
    engine._supervise_tick(t0 + 1.5)
    assert engine._dispatcher.ready_workers() == [] and "r1" in engine._dispatcher.queue
    _add(engine, "w2", t0 + 2, incarnation=1)   # the first restarted worker
    assert _resumed_on(engine, "w2") == ["r1"]


def test_a_resume_avoids_a_worker_that_missed_its_last_pings():
    """QA85 HIGH 2: w0 and w1 hang 0.3 s apart (timeout 1 s, pings every 0.3 s). When w0 is
    fenced, w1 is silent for 0.75 s (two missed pings) but short of its timeout: r1 goes on
    on w2, which answers, not on w1 (the tenant's next home, the old choice)."""
    engine = _engine(health_timeout_s=1.0, ping_interval_s=0.3)
    t0 = engine.t0
    for worker_id in ("w0", "w1", "w2"):
        _add(engine, worker_id, t0)
    _submit(engine, "r1", t0)
    _stream(engine, "r1", "w0", t0)
    assert engine._channels["w0"].items() == ["r1"]
    engine._supervisor.on_heard("w1", 0, t0 + 0.3)
    engine._supervisor.on_heard("w2", 0, t0 + 1.0)
    plan, _ = engine._supervise_tick(t0 + 1.05)
    assert [worker_id for worker_id, _ in plan.fence] == ["w0"]
    assert _resumed_on(engine, "w2") == ["r1"] and engine._channels["w1"].items() == []


def test_a_quiet_worker_gets_a_waiting_request_once_it_answers_again():
    """w1 missed its pings and w0 (fresh) is at its limit: r1 waits; the tick after w1
    answers again sends it there (the supervise tick pumps the queue)."""
    engine = _engine(health_timeout_s=5.0, max_running=1)
    t0 = engine.t0
    _add(engine, "w0", t0)
    _add(engine, "w1", t0)
    engine._supervisor.on_heard("w0", 0, t0 + 2.5)
    now = t0 + 2.6   # w1 silent 2.6 s > half its 5 s health timeout (and two pings of 0.5 s): quiet
    for request_id in ("a", "b", "r1"):
        _submit(engine, request_id, now)
    assert engine._channels["w0"].items() == ["a", "b"] and engine._channels["w1"].items() == []
    assert "r1" in engine._dispatcher.queue
    engine._supervisor.on_heard("w1", 0, now + 0.1)
    engine._supervise_tick(now + 0.2)
    assert engine._channels["w1"].items() == ["r1"]


def test_a_requeued_stream_waits_its_queue_bound_from_its_requeue_then_fails_not_retryable():
    """Every worker fenced 200 s into a stream (queue bound 10 s): it is not failed at the
    next tick for its age, but 10 s after its requeue with no worker back, as "overloaded"
    that a client cannot retry transparently (tokens were sent)."""
    engine = _engine(health_timeout_s=5.0, max_queue_wait_s=10.0)
    t0 = engine.t0
    for worker_id in ("w0", "w1", "w2"):
        _add(engine, worker_id, t0)
    _submit(engine, "r1", t0)
    _stream(engine, "r1", "w0", t0 + 199)
    plan, _ = engine._supervise_tick(t0 + 200)   # all silent since t0: all fenced at once
    assert len(plan.fence) == 3 and "r1" in engine._dispatcher.queue
    engine._supervise_tick(t0 + 200.1)
    assert "r1" in engine._dispatcher.queue and not [e for e in engine.delivered if isinstance(e, ErrorEvent)]
    engine._supervise_tick(t0 + 211)
    (error,) = [e for e in engine.delivered if isinstance(e, ErrorEvent)]
    assert error.request_id == "r1" and error.code == "overloaded" and not error.retryable


def test_a_restart_that_never_becomes_ready_is_still_killed_and_told_and_one_that_exits_at_once():
    """Workers not in the dispatcher (starting) are fenced as before: the tick kills a start
    that timed out and says so; an exit while starting is told at once (no request to settle)."""
    engine = _engine(health_timeout_s=5.0)
    t0 = engine.t0
    for worker_id in ("w0", "w1"):
        engine._channels[worker_id] = FakeChannel()
        engine._supervisor.on_spawned(worker_id, 1, t0)
    told = []
    engine.on_worker_event = told.append
    engine._channels["w1"].alive = False
    engine._on_exit("w1", 1, "exited with status 1")
    assert told == ["worker w1 exited with status 1 while starting; restarting it in 0.4 s"]
    start_timeout_s = engine._supervisor.config.start_timeout_s
    plan, lines = engine._supervise_tick(t0 + start_timeout_s + 1)
    assert ("w0", "did not start in time") in plan.fence and engine._channels["w0"].killed
    assert lines == ["worker w0 did not start in time, killed; restarting it in 0.4 s"]
