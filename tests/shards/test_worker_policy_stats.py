"""A worker's stats carry its KV policy's actions: pins and prefetches since start, each
tenant's pinned blocks now; /metrics shows them as `stepahead_worker_counts_total` and
`stepahead_worker_tenant_level` fields. A policy without them adds none."""
from __future__ import annotations

import random
import time

import pytest

from cache.policies import make_policy
from gateway.engine_series import worker_gauges
from shards.model_runner import ModelRunner
from shards.protocol import ApplyForecast, SamplingParams, StatsRequest, WorkerStats, WorkItem
from shards.worker import WorkerConfig, WorkerLoop
from tests.cache.test_policies_predictive import lognormal_forecast

ACTION_FIELDS = {"num_pins_set", "num_pins_refused", "num_pins_declined", "num_prefetches", "num_prefetches_used",
                 "num_prefetches_wasted"}


def _stats_after_a_tool_wait(tiny_loaded, policy_name: str) -> dict:
    """A worker with `policy_name` serves session "s" of tenant "t" (40 prompt tokens: 2
    full blocks), gets its forecast (a tool call comes next), and answers a StatsRequest."""
    runner = ModelRunner(tiny_loaded, num_hot_blocks=64, block_size=16, policy=make_policy(policy_name))
    out: list = []
    loop = WorkerLoop("w0", WorkerConfig(model="tiny"), runner, tiny_loaded.tokenizer, out.append)
    rng = random.Random(0)
    item = WorkItem("r1", "t", [rng.randrange(250) for _ in range(40)],
                    SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True))
    item.session = "s"
    loop.handle(item)
    for _ in range(200):
        if not loop.has_work():
            break
        loop.step()
    loop.handle(ApplyForecast(lognormal_forecast("s", time.time(), median_s=30.0, sigma=0.5, p_return=0.9)))
    loop.handle(StatsRequest())
    reply = out[-1]
    assert isinstance(reply, WorkerStats)
    return reply.stats


@pytest.mark.parametrize("policy_name, counts, num_pinned", [
    ("predictive", {"num_pins_set": 1, "num_pins_refused": 0, "num_prefetches": 0, "num_prefetches_used": 0,
                    "num_prefetches_wasted": 0}, 2),
    ("ttl", {"num_pins_set": 1, "num_pins_declined": 0}, 2),
    ("kvflow", {"num_prefetches": 0, "num_prefetches_used": 0, "num_prefetches_wasted": 0}, None),
    ("lru", {}, None),
])
def test_worker_stats_and_gauges_carry_the_policys_pins_and_prefetches(tiny_loaded, policy_name, counts, num_pinned):
    stats = _stats_after_a_tool_wait(tiny_loaded, policy_name)
    assert {name: stats[name] for name in ACTION_FIELDS & stats.keys()} == counts
    assert stats["tenants"]["t"].get("num_pinned_blocks") == num_pinned
    gauges = worker_gauges("tiny", [{"worker": "w0", **stats}])
    base = (("model_name", "tiny"), ("worker", "w0"))
    assert {name: gauges[("stepahead_worker_counts_total", base + (("field", name),))]
            for name in counts} == {name: float(number) for name, number in counts.items()}
    shown = {labels[-1][1] for family, labels in gauges if family == "stepahead_worker_counts_total"}
    assert shown & ACTION_FIELDS == counts.keys()
    pinned = gauges.get(("stepahead_worker_tenant_level", base + (("tenant", "t"), ("field", "num_pinned_blocks"))))
    assert pinned == (None if num_pinned is None else float(num_pinned))


def test_a_tenant_whose_forecasts_proved_wrong_shows_forecasts_followed_0(tiny_loaded):
    """QA44: whether the predictive policy had fallen back to LRU for a tenant was not
    observable. Forecasts promising returns that never come, scored once the horizon
    passed, turn the tenant's `forecasts_followed` field from absent to 0."""
    runner = ModelRunner(tiny_loaded, num_hot_blocks=64, block_size=16, policy=make_policy(
        "predictive", accuracy_min_events=3, accuracy_alpha=0.5, default_horizon_s=0.02, rate_half_life_s=1e12))
    out: list = []
    loop = WorkerLoop("w0", WorkerConfig(model="tiny"), runner, tiny_loaded.tokenizer, out.append)
    rng = random.Random(0)
    for number in range(4):
        item = WorkItem(f"r{number}", "t", [rng.randrange(250) for _ in range(40)],
                        SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True))
        item.session = f"s{number}"
        loop.handle(item)
        while loop.has_work():
            loop.step()
        loop.handle(StatsRequest())
        shown = out[-1].stats["tenants"].get("t", {}).get("forecasts_followed")
        assert shown == (None if number < 3 else 0)   # None: fewer than accuracy_min_events scored
        loop.handle(ApplyForecast(lognormal_forecast(f"s{number}", time.time(), median_s=0.001, sigma=0.2,
                                                     p_return=0.99)))
        time.sleep(0.05)   # the horizon passes: the session did not return
        runner.blocks.tick()
    loop.handle(StatsRequest())
    stats = out[-1].stats
    assert stats["tenants"]["t"]["forecasts_followed"] == 0
    gauges = worker_gauges("tiny", [{"worker": "w0", **stats}])
    key = ("stepahead_worker_tenant_level", (("model_name", "tiny"), ("worker", "w0"), ("tenant", "t"),
                                            ("field", "forecasts_followed")))
    assert gauges[key] == 0.0
