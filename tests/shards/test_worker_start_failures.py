"""A worker that cannot load its model (at a restart, after the start): why it shows in the
log and /health, what its process exits with, and requests refused at once rather than left
to wait `max_queue_wait_s` for it; and a KV tier too large for torch to count, refused in one line."""
from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time

import pytest

from cache.kv_arena import KVLayout
from shards.dispatcher import DispatchConfig, Dispatcher
from shards.engine import LocalEngine
from shards.kv_memory import kv_arena
from shards.model_files import ModelLoadError
from shards.protocol import ErrorEvent, FinishEvent, SamplingParams, WorkItem
from shards.route_records import RouterConfig
from shards.router import Router
from shards.supervisor import Supervisor

LOAD_ERROR = "ModelLoadError: model '/gone' is neither 'smollm2', 'tiny' nor a local model directory"


# --- the KV tier's size ---------------------------------------------------------------------
@pytest.mark.parametrize("num_blocks", [2**62, 2**63 - 1])
def test_a_hot_tier_too_large_for_torch_to_count_is_the_one_line_lower_num_hot_blocks_error(num_blocks):
    with pytest.raises(ModelLoadError, match=r"hot tier of .* blocks .* lower num_hot_blocks \(--hot-blocks\)"):
        kv_arena(KVLayout(2, 2, 16, 16), num_blocks, "hot")


def test_a_host_tier_too_large_names_its_own_setting():
    with pytest.raises(ModelLoadError, match=r"lower num_host_blocks \(--host-blocks\)"):
        kv_arena(KVLayout(2, 2, 16, 16), 2**62, "host")


# --- the supervisor's bookkeeping -------------------------------------------------------------
def test_a_failed_load_fences_with_its_first_line_and_is_kept_across_restarts_until_ready():
    supervisor = Supervisor()
    supervisor.on_spawned("w0", 0, 0.0)
    supervisor.on_ready("w0", 0, 0.0)
    supervisor.on_exit("w0", 0, 1.0, "killed by SIGKILL")
    supervisor.on_spawned("w0", 1, 1.2)
    assert supervisor.cannot_start() is None   # restarting after a crash: it comes back
    assert supervisor.on_start_failed("w0", 1, 1.5, LOAD_ERROR + "\nsecond line")
    health = supervisor.health("w0")
    assert health.state == "fenced" and health.fence_reason == "failed to start: " + LOAD_ERROR
    assert health.num_failed_starts == 1 and supervisor.restart_delay_s("w0") == 0.4   # the backoff holds
    assert supervisor.cannot_start() == "worker w0 failed to start: " + LOAD_ERROR
    supervisor.on_spawned("w0", 2, 2.0)
    assert supervisor.health("w0").start_error == LOAD_ERROR + "\nsecond line"
    assert supervisor.cannot_start() is not None   # loading again: still no worker that can start
    assert not supervisor.on_start_failed("w0", 1, 2.1, "stale")   # an older incarnation's
    supervisor.on_ready("w0", 2, 3.0)
    assert supervisor.cannot_start() is None and supervisor.health("w0").start_error == ""


def test_the_workers_cannot_start_only_once_every_slot_failed_to_load():
    supervisor = Supervisor()
    for worker_id in ("w0", "w1"):
        supervisor.on_spawned(worker_id, 0, 0.0)
        supervisor.on_ready(worker_id, 0, 0.0)
        supervisor.on_exit(worker_id, 0, 1.0, "killed by SIGKILL")
        supervisor.on_spawned(worker_id, 1, 1.2)
    supervisor.on_start_failed("w1", 1, 1.5, LOAD_ERROR)
    assert supervisor.cannot_start() is None
    supervisor.on_start_failed("w0", 1, 1.6, LOAD_ERROR)
    assert supervisor.cannot_start() == "worker w0 failed to start: " + LOAD_ERROR


# --- the dispatcher -----------------------------------------------------------------------------
def _item(request_id):
    return WorkItem(request_id, "t", list(range(40)), SamplingParams(max_tokens=4))


def test_while_no_worker_can_start_queued_requests_fail_now_and_new_ones_at_once():
    dispatcher = Dispatcher(Router(RouterConfig(block_size=16)), DispatchConfig(max_queue_wait_s=120.0))
    dispatcher.add_worker("w0", None, 0.0)
    dispatcher.remove_worker("w0", 1.0)   # crashed: a request waits for its restart
    assert dispatcher.submit(_item("a"), [], 1.1).deliveries == []
    out = dispatcher.set_cannot_start("worker w0 failed to start: " + LOAD_ERROR, 1.5, 1.2)
    [failed] = out.deliveries
    assert failed.request_id == "a" and failed.code == "overloaded" and failed.retryable
    assert "the model's workers cannot start (worker w0 failed to start: ModelLoadError" in failed.message
    assert len(dispatcher.queue) == 0 and "a" not in dispatcher.requests
    [refused] = dispatcher.submit(_item("b"), [], 1.3).deliveries
    assert refused.code == "overloaded" and "cannot start" in refused.message and refused.retry_after_s == 1.0
    assert dispatcher.stats.num_rejected == {"workers_cannot_start": 2}
    dispatcher.add_worker("w0", None, 5.0)   # a worker serves again: requests go to it
    out = dispatcher.submit(_item("c"), [], 5.1)
    assert out.deliveries == [] and [w for w, _ in out.sends] == ["w0"]


def test_the_refusals_retry_after_counts_down_to_the_next_restart_and_ends_when_one_may_start():
    """QA114: Retry-After was the last failed slot's whole restart delay, never counting
    down; and a restart that crashed (not a failed load) left requests refused."""
    dispatcher = Dispatcher(Router(RouterConfig(block_size=16)), DispatchConfig(max_queue_wait_s=120.0))
    dispatcher.set_cannot_start("worker w0 failed to start: " + LOAD_ERROR, 20.0, 2.0)
    assert [dispatcher.submit(_item(f"r{t}"), [], t).deliveries[0].retry_after_s for t in (2.0, 12.0, 19.5)] \
        == [18.0, 8.0, 1.0]
    dispatcher.set_cannot_start(None, 20.0, 13.0)   # a slot restarting after a crash: waited for
    assert dispatcher.submit(_item("w"), [], 13.1).deliveries == [] and "w" in dispatcher.requests


def test_a_restart_that_crashed_while_loading_is_no_failed_load():
    supervisor = Supervisor()
    supervisor.on_spawned("w0", 0, 0.0)
    supervisor.on_start_failed("w0", 0, 1.0, LOAD_ERROR)
    assert supervisor.cannot_start() is not None
    assert supervisor.next_restart_s() == 1.0 + supervisor.restart_delay_s("w0")
    supervisor.on_spawned("w0", 1, 2.0)
    assert supervisor.cannot_start() is not None   # trying again: still refused meanwhile
    supervisor.on_exit("w0", 1, 2.5, "killed by SIGKILL")   # files restored, the load killed: a crash
    assert supervisor.cannot_start() is None and supervisor.health("w0").start_error == ""


# --- end to end: a restart that cannot load -----------------------------------------------------
async def _until(predicate, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def _collect(eng, item):
    return [event async for event in eng.generate(item)]


def test_a_worker_that_cannot_load_at_its_restart_says_why_exits_non_zero_and_requests_fail_fast():
    eng = LocalEngine("tiny", num_workers=1, num_hot_blocks=64, threads_per_worker=1, max_queue_wait_s=120.0)
    loop = asyncio.new_event_loop()
    told: list[str] = []

    async def run():
        await eng.start()
        eng.on_worker_event = told.append
        good = eng.config
        eng.config = dataclasses.replace(good, model="/gone")   # the model's files went away
        os.kill(eng.worker_pid("w0"), signal.SIGKILL)
        await _until(lambda: eng.health()["workers"]["w0"]["fence_reason"].startswith("failed to start"), 20)
        failed_channel = eng._channels["w0"]
        started = time.monotonic()
        events = await _collect(eng, WorkItem("r1", "t", [5] * 20, SamplingParams(max_tokens=2)))
        waited_s = time.monotonic() - started
        await _until(lambda: eng.health()["workers"]["w0"]["num_restarts"] >= 2
                     and eng.health()["workers"]["w0"]["state"] == "fenced", 20)
        health = eng.health()["workers"]["w0"]
        await asyncio.to_thread(failed_channel._process.join, 5)
        exitcode = failed_channel._process.exitcode
        eng.config = good   # the files are back: the next restart serves
        await _until(lambda: eng.health()["workers"]["w0"]["ready"], 30)
        after = await _collect(eng, WorkItem("r2", "t", [5] * 20, SamplingParams(max_tokens=2)))
        return events, waited_s, health, exitcode, after

    try:
        events, waited_s, health, exitcode, after = loop.run_until_complete(asyncio.wait_for(run(), 90))
    finally:
        loop.run_until_complete(eng.stop())
        loop.close()
    assert health["fence_reason"] == "failed to start: " + LOAD_ERROR
    assert exitcode == 3   # not 0, a clean exit's status
    [error] = events
    assert isinstance(error, ErrorEvent) and error.code == "overloaded" and waited_s < 5
    assert "the model's workers cannot start (worker w0 failed to start: ModelLoadError" in error.message
    assert isinstance(after[-1], FinishEvent)   # back once a worker serves again
    # the kill, then the error in full once, then short lines for the same error, then back
    assert told[0].startswith("worker w0 killed by SIGKILL; restarting it in 0.2 s")
    assert told[1] == (f"worker w0 failed to start: {LOAD_ERROR}; restarting it in 0.4 s; "
                       "until a worker starts, the model's requests are refused")
    repeats = told[2:-1]
    assert repeats and all(line.startswith("worker w0 failed to start again (the same error; ") for line in repeats)
    assert sum(LOAD_ERROR in line for line in told) == 1
    assert told[-1].startswith("worker w0 serves again")


def test_a_failed_load_heard_while_the_engine_stops_restarts_nothing_and_says_nothing():
    """QA123: SIGTERM while workers could not start logged "restarting it in ..." for a
    restart that never came."""
    from shards.protocol import WorkerFailed

    eng = LocalEngine("tiny", num_workers=1, num_hot_blocks=64, threads_per_worker=1)
    loop = asyncio.new_event_loop()
    told: list[str] = []
    try:
        loop.run_until_complete(eng.start())
        eng.on_worker_event = told.append
        incarnation = eng._supervisor.health("w0").incarnation
    finally:
        loop.run_until_complete(eng.stop())
        loop.close()
    eng._on_message("w0", incarnation, WorkerFailed("w0", LOAD_ERROR))
    assert told == []
    assert not eng._supervisor.health("w0").fence_reason.startswith("failed to start")
