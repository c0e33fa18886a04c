"""New tenant weights and HOT reservations reach a running engine's queue, router and
workers (real worker processes on the tiny model), and the config a restart uses."""
from __future__ import annotations

import asyncio

import pytest

from shards.engine import LocalEngine
from shards.protocol import SamplingParams, WorkItem

ONE_TOKEN = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)


async def _serve(eng, request_id: str, tenant: str, prompt: list[int]) -> None:
    async for _ in eng.generate(WorkItem(request_id, tenant, prompt, ONE_TOKEN)):
        pass


def test_new_shares_reach_the_queue_the_router_and_the_workers_and_a_restart_starts_with_them():
    eng = LocalEngine("tiny", num_workers=1, num_hot_blocks=32, threads_per_worker=1, policy="predictive",
                      tenant_weights={"a": 1.0})

    async def run() -> dict:
        await asyncio.wait_for(eng.start(), 120)
        try:
            eng.set_tenant_shares({"a": 3.0, "b": 1.0}, {"a": 0.3, "b": 0.2})
            # two prompts of 20 blocks each fill the 32 HOT blocks: the policy learns the
            # tier's size and plans the reservations at its next tick
            for index, token in enumerate((5, 6, 7)):
                await asyncio.wait_for(_serve(eng, f"r{index}", "a", [token] * 320), 60)
            deadline = asyncio.get_running_loop().time() + 30
            while True:
                await eng.refresh_stats()
                tenants = eng.metrics()[0].get("tenants", {})
                if "num_reserved_blocks" in tenants.get("a", {}) and "num_reserved_blocks" in tenants.get("b", {}):
                    return tenants
                assert asyncio.get_running_loop().time() < deadline, "the worker never planned the reservation"
        finally:
            await asyncio.wait_for(eng.stop(), 60)

    tenants = asyncio.run(run())
    assert tenants["a"]["num_reserved_blocks"] == 9   # the whole blocks of 0.3 of the 32 HOT blocks (9.6)
    # b sent nothing: its row still has every counter (QA173: hot/host blocks were absent, so
    # its stepahead_worker_tenant_level series were missing, not 0)
    assert (tenants["b"]["num_reserved_blocks"], tenants["b"]["num_hot_blocks"], tenants["b"]["num_host_blocks"],
            tenants["b"]["num_requests"]) == (6, 0, 0, 0)
    assert eng.tenant_shares() == ({"a": 3.0, "b": 1.0}, {"a": 0.3, "b": 0.2})
    health = eng.health()   # what an admin's /health shows of the model
    assert (health["policy"], health["tenant_weights"], health["kv_shares"]) == (
        "predictive", {"a": 3.0, "b": 1.0}, {"a": 0.3, "b": 0.2})
    assert (eng._dispatcher.queue.weight("a"), eng._dispatcher.router._weights) == (3.0, {"a": 3.0, "b": 1.0})
    assert eng.config.tenant_weights == (("a", 3.0), ("b", 1.0))   # what a restarted worker is spawned with
    assert eng._dispatcher.config.tenant_weights == eng._dispatcher.router.config.tenant_weights == (
        ("a", 3.0), ("b", 1.0))
    assert dict(eng.config.policy_options)["static_shares"] == (("a", 0.3), ("b", 0.2))
    eng.set_tenant_shares({"a": 1.0}, None)   # back to reservations planned from demand
    assert "static_shares" not in dict(eng.config.policy_options) and eng.tenant_shares() == ({"a": 1.0}, None)


def test_shares_that_cannot_be_in_force_are_refused_and_change_nothing():
    eng = LocalEngine("tiny", num_workers=1, policy="lru", tenant_weights={"a": 2.0})
    with pytest.raises(ValueError, match="has no reservations"):
        eng.set_tenant_shares({"a": 1.0}, {"a": 0.5})
    with pytest.raises(ValueError, match="positive"):
        eng.set_tenant_shares({"a": 0.0}, None)
    assert eng.tenant_shares() == ({"a": 2.0}, None)
    predictive = LocalEngine("tiny", num_workers=1, policy="predictive")
    with pytest.raises(ValueError, match="sum to at most 1"):
        predictive.set_tenant_shares({}, {"a": 0.7, "b": 0.4})


def test_health_says_whether_the_engine_keeps_a_prefix_cache():
    # the no-caching baseline (`prefix_caching = false`) is visible to an admin, not only in its numbers
    assert LocalEngine("tiny", 1, prefix_caching=False).health()["prefix_caching"] is False
    assert LocalEngine("tiny", 1).health()["prefix_caching"] is True
