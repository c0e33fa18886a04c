"""End to end, real worker processes on the tiny model: a request the home worker's KV
rule would hold back behind its tenant's running stream goes to an idle worker instead
(QA214 F1)."""
from __future__ import annotations

import asyncio
import random

from shards.engine import LocalEngine
from shards.protocol import FinishEvent, SamplingParams, WorkItem

LONG = SamplingParams(max_tokens=100000, temperature=0.0, ignore_eos=True)
SHORT = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)


def test_a_long_prompt_does_not_wait_behind_its_tenants_stream_beside_an_idle_worker():
    # 16 hot blocks: past 8 pinned, a tenant alone pins no more on a worker
    eng = LocalEngine("tiny", num_workers=2, num_hot_blocks=16, threads_per_worker=1)
    loop = asyncio.new_event_loop()

    async def run():
        hog = eng.generate(WorkItem("hog", "t", [1] * 20, LONG))   # 2 blocks on t's home
        await asyncio.wait_for(hog.__anext__(), 20.0)
        home = eng.worker_of("hog")
        prompt = [random.Random(3).randrange(250) for _ in range(150)]   # 10 blocks: 2 + 10 > 8
        events = [e async for e in eng.generate(WorkItem("probe", "t", prompt, SHORT))]
        hog_running = eng.worker_of("hog") == home   # the probe did not wait for the hog's end
        await hog.aclose()
        return home, hog_running, events[-1]

    try:
        loop.run_until_complete(asyncio.wait_for(eng.start(), 120))
        home, hog_running, finish = loop.run_until_complete(asyncio.wait_for(run(), 30.0))
    finally:
        loop.run_until_complete(eng.stop())
        loop.close()
    assert isinstance(finish, FinishEvent) and finish.num_output_tokens == 2
    assert finish.worker_id != home and hog_running
