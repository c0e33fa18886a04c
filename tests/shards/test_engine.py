"""The local engine end to end: real worker processes on the tiny model."""
from __future__ import annotations

import asyncio
import os
import signal

import pytest

from shards.engine import LocalEngine
from shards.protocol import ErrorEvent, FinishEvent, SamplingParams, TokenEvent, WorkItem


@pytest.fixture(scope="module")
def engine():
    eng = LocalEngine("tiny", num_workers=2, num_hot_blocks=256, threads_per_worker=1)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(eng.start())
    yield eng, loop
    loop.run_until_complete(eng.stop())
    loop.close()


async def _collect(eng, item):
    events = []
    async for event in eng.generate(item):
        events.append(event)
    return events


def _prompt(eng, text):
    return eng.tokenizer.encode(text, add_special_tokens=False)


def test_generate_streams_tokens_then_one_finish(engine):
    eng, loop = engine
    item = WorkItem("a1", "t", _prompt(eng, "hello world " * 8),
                    SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True))
    events = loop.run_until_complete(_collect(eng, item))
    assert isinstance(events[-1], FinishEvent)
    assert sum(len(e.token_ids) for e in events if isinstance(e, TokenEvent)) == 10
    assert events[-1].num_output_tokens == 10 and events[-1].finish_reason == "length"


def test_generate_second_request_reuses_prefix_on_same_worker(engine):
    eng, loop = engine
    prompt = _prompt(eng, "the shared system prompt of tenant t. " * 4)
    params = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    first = loop.run_until_complete(_collect(eng, WorkItem("b1", "t", prompt, params)))[-1]
    # both workers are idle, so the router's tie-break sends both to the same worker
    second = loop.run_until_complete(_collect(eng, WorkItem("b2", "t", prompt + [65, 66], params)))[-1]
    assert first.num_cached_tokens == 0
    assert second.worker_id == first.worker_id
    assert second.num_cached_tokens == len(prompt) // 16 * 16


def test_generate_concurrent_requests_all_finish(engine):
    eng, loop = engine
    params = SamplingParams(max_tokens=8, temperature=0.7, seed=3)

    async def many():
        items = [WorkItem(f"c{i}", "t", _prompt(eng, f"request number {i} "), params) for i in range(6)]
        return await asyncio.gather(*(_collect(eng, it) for it in items))

    results = loop.run_until_complete(many())
    assert all(isinstance(r[-1], FinishEvent) for r in results)


def test_generate_closed_early_cancels_and_frees_blocks(engine):
    eng, loop = engine
    params = SamplingParams(max_tokens=500, temperature=0.0, ignore_eos=True)

    async def take_two():
        gen = eng.generate(WorkItem("d1", "t", _prompt(eng, "cancel me " * 10), params))
        got = [await gen.__anext__(), await gen.__anext__()]
        await gen.aclose()
        return got

    loop.run_until_complete(take_two())
    loop.run_until_complete(eng.refresh_stats())
    loop.run_until_complete(asyncio.sleep(0.3))
    assert all(w["num_running"] == 0 for w in eng.metrics())


def test_generate_prompt_over_context_is_an_error(engine):
    eng, loop = engine
    item = WorkItem("e1", "t", [65] * (eng.max_context_tokens + 1), SamplingParams(max_tokens=2))
    events = loop.run_until_complete(_collect(eng, item))
    assert isinstance(events[-1], ErrorEvent) and events[-1].code == "context_length_exceeded"


def test_generate_worker_killed_midstream_ends_with_error(engine):
    eng, loop = engine
    params = SamplingParams(max_tokens=100000, temperature=0.0, ignore_eos=True)

    async def run():
        gen = eng.generate(WorkItem("k1", "t", _prompt(eng, "long running "), params))
        first = await gen.__anext__()
        victim = next(w for w in eng._workers.values() if "k1" in w.in_flight)
        os.kill(victim.process.pid, signal.SIGKILL)
        rest = [e async for e in gen]
        return first, rest

    first, rest = loop.run_until_complete(asyncio.wait_for(run(), 30))
    assert isinstance(first, TokenEvent)
    assert isinstance(rest[-1], ErrorEvent) and rest[-1].code == "worker_died"
