"""A worker's spawn never holds the engine's lock while the transport waits on another
process (the fork server importing torch, or stopped): requests, /health and the
supervision go on meanwhile, what the engine sends the new incarnation meanwhile reaches it
once it runs, and a stop or a fence meanwhile kills it once spawned (QA137 #1)."""
from __future__ import annotations

import asyncio
import threading
import time

from shards.engine import LocalEngine
from shards.protocol import ErrorEvent, SamplingParams, Shutdown, WorkerReady, WorkItem

PATIENCE_S = 2.0   # far more than any lock path takes; far less than a held spawn


class FakeChannel:
    """What the engine sends a worker, and whether it was killed (no process)."""

    def __init__(self, worker_id: str, incarnation: int) -> None:
        self.worker_id, self.incarnation = worker_id, incarnation
        self.sent: list = []
        self.killed = False

    def send(self, message) -> None:
        self.sent.append(message)

    def is_alive(self) -> bool:
        return not self.killed

    def pid(self) -> int | None:
        return 4242

    def kill(self) -> None:
        self.killed = True

    def stop(self, timeout_s: float) -> None:
        self.killed = True


class HeldTransport:
    """A transport whose spawn waits until `release` is set (as a fork waits on a fork
    server importing torch, or stopped), or raises `error` then."""
    name = "local"
    can_share_memory = True

    def __init__(self, error: Exception | None = None) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.error = error
        self.channels: list[FakeChannel] = []

    def spawn(self, worker_id, incarnation, config, on_message, on_exit):
        self.entered.set()
        assert self.release.wait(30), "the test never released the spawn"
        if self.error is not None:
            raise self.error
        channel = FakeChannel(worker_id, incarnation)
        self.channels.append(channel)
        return channel

    def close(self) -> None:
        pass


def _engine(transport: HeldTransport, *, restarting: bool = False, **options) -> LocalEngine:
    engine = LocalEngine("tiny", 1, prefix_transfer=False, **options)
    engine._transport = transport
    if restarting:
        engine._supervise_task = object()   # "after the start": a restart's spawn
    return engine


def _returns_in_time(call, timeout_s: float = PATIENCE_S):
    """`call()` from another thread: (whether it returned within `timeout_s`, its result)."""
    result = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(timeout_s)
    return (not thread.is_alive()), (result[0] if result else None)


def _spawn_held(engine: LocalEngine, transport: HeldTransport) -> threading.Thread:
    """`engine._spawn("w0")` in a thread, as the start runs it, now waiting in the transport."""
    thread = threading.Thread(target=engine._spawn, args=("w0",), daemon=True)
    thread.start()
    assert transport.entered.wait(5)
    return thread


def _ready(engine: LocalEngine, incarnation: int = 0) -> None:
    """The incarnation's WorkerReady, as its reader thread hands it on."""
    engine._on_message("w0", incarnation, WorkerReady("w0", "tiny", 2048, 4242))


def _submit(engine: LocalEngine, request_id: str, loop, now: float | None = None) -> asyncio.Queue:
    """A request submitted as `LocalEngine.generate` does it (under the engine's lock); its stream."""
    stream: asyncio.Queue = asyncio.Queue()
    item = WorkItem(request_id, "t", list(range(40)), SamplingParams(max_tokens=2))
    with engine._lock:
        engine._streams[request_id] = (loop, stream)
        engine._perform(engine._dispatcher.submit(item, [], time.monotonic() if now is None else now))
    return stream


def test_health_and_a_request_do_not_wait_for_a_spawn_held_by_the_fork_server():
    transport = HeldTransport()
    engine = _engine(transport)
    loop = asyncio.new_event_loop()
    spawner = _spawn_held(engine, transport)
    try:
        answered, health = _returns_in_time(engine.health)
        assert answered, "health() waited for the spawn"
        assert health["workers"]["w0"]["state"] == "starting" and health["workers"]["w0"]["incarnation"] == 0
        _ready(engine)   # the worker runs already (its reader started before the spawn returned)
        assert _returns_in_time(lambda: _submit(engine, "r1", loop))[0], "the request waited for the spawn"
        assert engine._channels["w0"].pid() is None   # still the stand-in
    finally:
        transport.release.set()
        spawner.join(5)
        loop.close()
    [channel] = transport.channels
    assert engine._channels["w0"] is channel   # registered once the spawn returned
    assert [m.request_id for m in channel.sent if isinstance(m, WorkItem)] == ["r1"]   # sent meanwhile, delivered


def test_a_restart_held_by_the_fork_server_leaves_supervision_running_and_queued_requests_expire():
    transport = HeldTransport()
    engine = _engine(transport, restarting=True, max_queue_wait_s=1.0)
    loop = asyncio.new_event_loop()
    returned, _ = _returns_in_time(lambda: engine._spawn("w0"))
    try:
        assert returned, "a restart's _spawn waited for the fork server (the supervision would stop)"
        assert transport.entered.wait(5)
        now = time.monotonic()
        stream = _submit(engine, "r1", loop, now)   # queued: the model's only worker restarts
        ticked, _ = _returns_in_time(lambda: engine._supervise_tick(now + 1.5))
        assert ticked
        loop.run_until_complete(asyncio.sleep(0))   # the tick's delivery, scheduled on the stream's loop
        [event] = [stream.get_nowait() for _ in range(stream.qsize())]
        assert isinstance(event, ErrorEvent) and event.code == "overloaded"
    finally:
        transport.release.set()
        loop.close()
    deadline = time.monotonic() + 5
    while not isinstance(engine._channels["w0"], FakeChannel) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine._channels["w0"] is transport.channels[0]   # put in place by the spawn's own thread


def test_a_stop_while_the_spawn_is_held_kills_the_worker_once_it_is_spawned():
    transport = HeldTransport()
    engine = _engine(transport)
    spawner = _spawn_held(engine, transport)
    try:
        abandoned, _ = _returns_in_time(lambda: engine._abandon_start(), timeout_s=5.0)   # waits 2 s at most
        assert abandoned, "abandoning the start waited for the spawn"
        assert not engine._channels["w0"].is_alive()
    finally:
        transport.release.set()
        spawner.join(5)
    [channel] = transport.channels
    assert channel.killed


def test_a_restart_whose_spawn_fails_is_that_incarnations_exit():
    transport = HeldTransport(error=OSError("the fork server went away"))
    engine = _engine(transport, restarting=True)
    told: list[str] = []
    engine.on_worker_event = told.append
    transport.release.set()
    engine._spawn("w0")
    deadline = time.monotonic() + 5
    while engine._supervisor.health("w0").state != "fenced" and time.monotonic() < deadline:
        time.sleep(0.01)
    health = engine._supervisor.health("w0")
    assert health.state == "fenced" and health.num_failed_starts == 1
    assert health.fence_reason == "could not be started (OSError: the fork server went away)"
    assert told and told[0].startswith("worker w0 could not be started (OSError")
    assert not engine._channels["w0"].is_alive()


def test_a_spawning_channel_holds_what_is_sent_until_the_process_runs_and_kills_it_if_asked():
    from shards.spawning_channel import SpawningChannel

    held = SpawningChannel("w0", 3)
    held.send(Shutdown())
    held.send("second")
    assert held.is_alive() and held.pid() is None
    channel = FakeChannel("w0", 3)
    held.attach(channel)
    held.send("third")
    assert channel.sent[1:] == ["second", "third"] and isinstance(channel.sent[0], Shutdown)
    assert not channel.killed and held.pid() == 4242

    killed_first = SpawningChannel("w0", 4)
    killed_first.kill()
    later = FakeChannel("w0", 4)
    killed_first.attach(later)
    assert later.killed

    failed = SpawningChannel("w0", 5)
    failed.fail()
    failed.send("dropped")
    assert not failed.is_alive()
    failed.stop(0.0)   # returns at once: no process to stop
