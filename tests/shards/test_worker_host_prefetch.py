"""A worker's predictive policy brings a waiting session's blocks back from the host tier
before its forecast return (real KV copies between the arenas), so the return finds its
prompt cached in the hot tier; without a host tier those blocks are gone. QA60 saw the
prefetch counters at 0 through the gateway (its tenants' forecasts never got trusted);
here the whole path below the gateway runs, on a clock the test moves."""
from __future__ import annotations

import random

import pytest

from cache.policies import make_policy
from cache.tiers import Tier
from shards.model_runner import ModelRunner
from shards.protocol import ApplyForecast, FinishEvent, SamplingParams, StatsRequest, WorkerStats, WorkItem
from shards.worker import WorkerConfig, WorkerLoop
from tests.cache.test_policies_predictive import lognormal_forecast


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def _serve(loop: WorkerLoop, out: list, request_id: str, session: str, tokens: list[int]) -> FinishEvent:
    item = WorkItem(request_id, "t", tokens, SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True))
    item.session = session
    loop.handle(item)
    while loop.has_work():
        loop.step()
    [finish] = [e for e in out if isinstance(e, FinishEvent) and e.request_id == request_id]
    return finish


@pytest.mark.parametrize("num_host_blocks", [16, 0])
def test_a_waiting_sessions_blocks_come_back_hot_before_its_return(tiny_loaded, num_host_blocks):
    clock = Clock()
    runner = ModelRunner(tiny_loaded, num_hot_blocks=6, num_host_blocks=num_host_blocks, block_size=16,
                         policy=make_policy("predictive"), clock=clock)
    out: list = []
    loop = WorkerLoop("w0", WorkerConfig(model="tiny"), runner, tiny_loaded.tokenizer, out.append)
    rng = random.Random(0)
    a = [rng.randrange(250) for _ in range(48)]   # 3 full blocks
    _serve(loop, out, "a1", "A", a)
    loop.handle(ApplyForecast(lognormal_forecast("A", clock.now_s, median_s=2.0, sigma=0.2, p_return=1.0)))
    clock.now_s += 0.25
    _serve(loop, out, "b1", "B", [rng.randrange(250) for _ in range(80)])   # needs the hot tier: A moves out
    hot_hashes = {block.hash for block in runner.blocks.blocks(Tier.HOT) if block.is_cached}
    for _ in range(8):   # up to A's forecast return, ticking as the worker's housekeeping does
        clock.now_s += 0.2
        runner.blocks.tick()
    came_back = {block.hash for block in runner.blocks.blocks(Tier.HOT) if block.is_cached} - hot_hashes
    again = _serve(loop, out, "a2", "A", a + [5, 6])
    loop.handle(StatsRequest())
    stats = [e for e in out if isinstance(e, WorkerStats)][-1].stats
    if num_host_blocks:
        assert came_back and stats["num_prefetches"] == len(came_back) == stats["num_prefetches_used"]
        assert stats["num_prefetches_wasted"] == 0
        assert again.num_cached_tokens == 48   # every block of A's prompt, found hot
    else:
        assert stats["num_prefetches"] == 0 and again.num_cached_tokens < 48
