"""Fencing several workers at once, on an engine with fake channels (no processes): the
requests of a fenced worker go on on a healthy one, never on another worker being fenced
or found dead, and each fence line counts what really became of that worker's requests."""
from __future__ import annotations

import time

import pytest

from shards.engine import LocalEngine
from shards.protocol import Ping, SamplingParams, TokenEvent, WorkItem

HEALTH_TIMEOUT_S = 5.0


class FakeChannel:
    """What the engine sends a worker, and whether its process runs."""

    def __init__(self) -> None:
        self.sent: list = []
        self.alive = True
        self.killed = False

    def send(self, message) -> None:
        self.sent.append(message)

    def is_alive(self) -> bool:
        return self.alive

    def kill(self) -> None:
        self.killed = True

    def items(self) -> list[str]:
        return [m.request_id for m in self.sent if isinstance(m, WorkItem)]


@pytest.fixture
def engine():
    """Three ready workers, all heard from at `engine.t0`, and one request streaming on w0
    (its tenant's home: the lowest id) that has sent two tokens."""
    engine = LocalEngine("tiny", 3, health_timeout_s=HEALTH_TIMEOUT_S, prefix_transfer=False)
    engine.t0 = t0 = time.monotonic()
    engine._supervise_task = object()   # "after the start": fences are told to the operator
    for worker_id in ("w0", "w1", "w2"):
        engine._channels[worker_id] = FakeChannel()
        engine._supervisor.on_spawned(worker_id, 0, t0)
        assert engine._supervisor.on_ready(worker_id, 0, t0)
        engine._perform(engine._dispatcher.add_worker(worker_id, None, t0))
    item = WorkItem("r1", "t", list(range(40)), SamplingParams(max_tokens=100))
    with engine._lock:
        engine._perform(engine._dispatcher.submit(item, [], t0))
        engine._dispatcher.on_worker_message("w0", TokenEvent("r1", [5, 6], "ab", worker_id="w0"), t0)
    assert engine._channels["w0"].items() == ["r1"]
    return engine


def test_two_workers_silent_in_one_tick_resume_their_stream_on_the_healthy_one(engine):
    t0 = engine.t0
    engine._supervisor.on_heard("w2", 0, t0 + HEALTH_TIMEOUT_S)   # w2 answers; w0 and w1 do not
    plan, lines = engine._supervise_tick(t0 + HEALTH_TIMEOUT_S + 1)
    assert [worker_id for worker_id, _ in plan.fence] == ["w0", "w1"]
    request = engine._dispatcher.requests["r1"]   # not failed: still on its way
    assert request.worker_id == "w2"
    assert engine._channels["w1"].items() == []   # never sent to the other worker being fenced
    (resumed,) = [m for m in engine._channels["w2"].sent if isinstance(m, WorkItem)]
    assert resumed.request_id == "r1" and resumed.num_resumed_tokens == 2
    assert engine._channels["w0"].killed and engine._channels["w1"].killed and not engine._channels["w2"].killed
    assert any(isinstance(m, Ping) for m in engine._channels["w2"].sent)
    assert engine._dispatcher.stats.num_failed_worker_died == 0
    # F5: each line counts that worker's own requests: w1 ran none, so none of it failed
    assert "1 request(s) cut mid-reply go on" in lines[0] and "failed" not in lines[0]
    assert lines[1].startswith("worker w1 unresponsive") and "request" not in lines[1]


def test_a_dead_worker_whose_exit_is_not_handled_yet_is_no_resume_target(engine):
    engine._channels["w1"].alive = False   # killed with w0; its reader has not reported its exit yet
    engine._channels["w0"].alive = False
    engine._on_exit("w0", 0, "killed by SIGKILL")
    engine._supervise_tick(engine.t0 + 1)   # FI11: its requests go on once its exit settled
    assert engine._dispatcher.requests["r1"].worker_id == "w2"
    assert engine._channels["w1"].items() == []
    engine._on_exit("w1", 0, "killed by SIGKILL")   # its exit, handled later, fails nothing
    assert engine._dispatcher.requests["r1"].worker_id == "w2"
    assert engine._dispatcher.stats.num_failed_worker_died == 0


def test_a_worker_silent_past_the_timeout_is_no_resume_target_before_its_own_fence(engine):
    t0 = engine.t0
    now = t0 + HEALTH_TIMEOUT_S + 1   # w1 silent past the timeout; the tick that fences it has not run
    engine._supervisor.on_heard("w2", 0, t0 + HEALTH_TIMEOUT_S)
    with engine._lock:
        engine._supervisor.fence("w0", now, "exited")
        engine._perform(engine._remove_fenced("w0", "exited", now)[0])
    assert engine._dispatcher.requests["r1"].worker_id == "w2"
    assert engine._channels["w1"].items() == []


def test_when_every_worker_is_fenced_the_request_waits_for_a_restarted_one(engine):
    """No healthy worker left: the cut stream waits in the queue (FI11: the router no longer
    falls back to a worker being fenced, which burnt its second try), then goes on, from its
    last token, on the first worker restarted."""
    now = engine.t0 + HEALTH_TIMEOUT_S + 1
    plan, lines = engine._supervise_tick(now)
    assert [worker_id for worker_id, _ in plan.fence] == ["w0", "w1", "w2"]
    assert len(lines) == 3 and all(channel.killed for channel in engine._channels.values())
    assert engine._channels["w1"].items() == [] and engine._channels["w2"].items() == []
    assert "r1" in engine._dispatcher.queue and engine._dispatcher.requests["r1"].worker_id is None
    assert engine._dispatcher.stats.num_failed_worker_died == 0
    assert "1 request(s) cut mid-reply go on" in lines[0] and "failed" not in " ".join(lines)
    engine._channels["w1"] = restarted = FakeChannel()
    engine._supervisor.on_spawned("w1", 1, now + 1)
    assert engine._supervisor.on_ready("w1", 1, now + 1)
    with engine._lock:
        engine._perform(engine._dispatcher.add_worker("w1", None, now + 1))
    (resumed,) = [m for m in restarted.sent if isinstance(m, WorkItem)]
    assert resumed.request_id == "r1" and resumed.num_resumed_tokens == 2
