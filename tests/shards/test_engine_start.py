"""The engine's start: cancelled (Ctrl+C) or failed, it leaves no worker behind."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

import shards.engine_start
from shards.engine import EngineStartError, LocalEngine
from cache.process_state import process_runs
from shards.protocol import FinishEvent, SamplingParams, WorkerReady, WorkItem
from shards.transport import StartCancelled

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")


def _engine(num_workers: int = 2) -> LocalEngine:
    return LocalEngine("tiny", num_workers=num_workers, num_hot_blocks=64, threads_per_worker=1)


def _holding_back_ready(engine: LocalEngine) -> None:
    """Workers of `engine` look as if they were still loading: their WorkerReady never
    reaches it (a real load takes from a second for 'tiny' to a minute)."""
    on_message = engine._on_message

    def held(worker_id, incarnation, message):
        if not isinstance(message, WorkerReady):
            on_message(worker_id, incarnation, message)

    engine._on_message = held


def test_a_start_cancelled_while_its_workers_load_kills_them_and_raises_start_cancelled():
    engine = _engine()
    _holding_back_ready(engine)

    async def start_then_cancel():
        start = asyncio.ensure_future(engine.start())
        deadline = time.monotonic() + 120
        while not all(engine.worker_pid(f"w{i}") for i in range(2)):   # both spawned, not ready
            assert not start.done() and time.monotonic() < deadline
            await asyncio.sleep(0.02)
        pids = [engine.worker_pid(f"w{i}") for i in range(2)]
        await asyncio.sleep(1.0)   # long enough for 'tiny' to load in earnest
        assert not start.done()
        engine.cancel_start()
        with pytest.raises(StartCancelled):
            await asyncio.wait_for(start, 30)
        return pids

    pids = asyncio.run(start_then_cancel())
    assert not any(process_runs(pid) for pid in pids)


def _threads_in(function_name: str) -> list[int]:
    import sys

    found = []
    for thread_id, frame in sys._current_frames().items():
        while frame is not None:
            if frame.f_code.co_name == function_name:
                found.append(thread_id)
                break
            frame = frame.f_back
    return found


def test_a_start_whose_task_is_cancelled_leaves_no_thread_waiting_and_no_worker(monkeypatch):
    """A timeout around `start` (asyncio's cancellation, which does not reach threads):
    the thread waiting for the workers stops too, instead of waiting out its deadline."""
    monkeypatch.setattr(shards.engine_start, "WORKER_START_TIMEOUT_S", 60.0)
    engine = _engine()
    _holding_back_ready(engine)

    async def start_with_a_timeout():
        start = asyncio.ensure_future(engine.start())
        deadline = time.monotonic() + 120
        while not _threads_in("_wait_ready"):   # spawned, now waiting for them to be ready
            assert not start.done() and time.monotonic() < deadline
            await asyncio.sleep(0.02)
        pids = [engine.worker_pid(f"w{i}") for i in range(2)]
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(start, 0.5)
        return pids, time.monotonic()

    pids, timed_out = asyncio.run(start_with_a_timeout())
    assert time.monotonic() - timed_out < 20   # asyncio.run waited for its threads: not the 60 s
    assert not _threads_in("_wait_ready")
    assert pids and all(pids) and not any(process_runs(pid) for pid in pids)


def test_a_start_cancelled_before_it_began_spawns_nothing():
    engine = _engine()
    engine.cancel_start()
    with pytest.raises(StartCancelled):
        asyncio.run(engine.start())
    assert engine.worker_pid("w0") is None


def test_a_start_that_fails_kills_the_workers_it_spawned(monkeypatch):
    monkeypatch.setattr(shards.engine_start, "WORKER_START_TIMEOUT_S", 0.0)   # no worker can be ready in time
    engine = _engine(num_workers=1)
    spawned, spawn = [], engine._spawn

    def spawn_and_note(worker_id: str) -> None:   # each pid as it is spawned (polling missed a fast failure)
        spawn(worker_id)
        spawned.append(engine.worker_pid(worker_id))

    engine._spawn = spawn_and_note
    with pytest.raises(EngineStartError, match="did not become ready in time"):
        asyncio.run(engine.start())
    pids = {pid for pid in spawned if pid}
    assert pids and not any(process_runs(pid) for pid in pids)


def test_a_tokenizer_that_cannot_load_fails_the_start_before_any_worker_is_spawned(tmp_path):
    from shards.model_files import ModelLoadError

    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    (tmp_path / "tokenizer.json").write_text("{}")
    engine = LocalEngine(str(tmp_path), num_workers=1, num_hot_blocks=64, threads_per_worker=1)
    spawned = []
    engine._spawn = spawned.append
    with pytest.raises(ModelLoadError, match=f"the tokenizer in {tmp_path} could not be loaded"):
        asyncio.run(engine.start())
    assert spawned == []   # not after the fork server imported torch and a worker tried


def test_cancel_start_after_the_start_changes_nothing():
    engine = _engine(num_workers=1)

    async def run():
        await engine.start()
        try:
            engine.cancel_start()
            item = WorkItem("r1", "t", list(range(40, 80)), SamplingParams(max_tokens=3, ignore_eos=True))
            events = [event async for event in engine.generate(item)]
            return events[-1], engine.health()["workers"]["w0"]
        finally:
            await engine.stop()

    last, worker = asyncio.run(run())
    assert isinstance(last, FinishEvent) and last.num_output_tokens == 3
    assert worker["ready"] and worker["num_restarts"] == 0
