"""A request cut short after the model started counts its tokens and its time to first token
in the vLLM-named metrics, as its traced step records them and as its tenant is charged,
and no success; one cut before the model (queued) counts none."""
from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics import Registry

from tests.gateway.test_disconnect import LONG, wait_until

TOKEN_FAMILIES = ("vllm:prompt_tokens", "vllm:generation_tokens", "vllm:prefix_cache_queries",
                  "vllm:prefix_cache_hits", "vllm:request_success")


def test_tokens_of_a_cut_request_count_no_success():
    registry = Registry()
    labels = registry.record_tokens(tenant="a", model="m", worker="w0", num_prompt_tokens=25, num_cached_tokens=16,
                                    num_output_tokens=5, ttft_s=0.02)
    assert labels == (("tenant", "a"), ("model_name", "m"), ("worker", "w0"))
    text = registry.render(tenant="a")
    series = 'tenant="a",model_name="m",worker="w0"'
    assert f"vllm:prompt_tokens_total{{{series}}} 25" in text
    assert f"vllm:generation_tokens_total{{{series}}} 5" in text
    assert f"vllm:prefix_cache_queries_total{{{series}}} 25" in text
    assert f"vllm:prefix_cache_hits_total{{{series}}} 16" in text
    assert f'vllm:time_to_first_token_seconds_count{{{series},service_tier="default"}} 1' in text
    assert "vllm:request_success_total" not in text


def _sums(text: str, tenant: str) -> dict[str, float]:
    """Each family's samples of `tenant`, summed over their other labels (workers)."""
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("tenant") != tenant:
                continue
            if sample.name.endswith("_total"):
                name = sample.name.removesuffix("_total")
                if name == "stepahead_requests":
                    name = f"{name}_{sample.labels['status']}"
            elif sample.name == "vllm:time_to_first_token_seconds_count":
                name = sample.name
            else:
                continue
            sums[name] = sums.get(name, 0.0) + sample.value
    return sums


async def test_a_stream_its_client_cut_counts_the_tokens_its_step_used_and_no_success(gateway):
    from agents_trace.step_queries import list_steps

    tenant, session = "cancel", f"cut-metrics-{time.monotonic_ns()}"
    limiter, tracer = gateway.state.limiters[tenant], gateway.state.tracer
    headers = {**gateway.headers(tenant), "x-session-id": session}
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
        async def scrape() -> dict[str, float]:
            return _sums((await client.get("/metrics", headers=gateway.headers(tenant))).text, tenant)

        before, spent_before = await scrape(), limiter.num_spent_tokens
        body = dict(LONG, stream=True, messages=[{"role": "user", "content": "Tell me about lighthouses. " * 4}])
        async with client.stream("POST", "/v1/chat/completions", headers=headers, json=body) as running:
            assert running.status_code == 200
            lines = running.aiter_lines()   # NOTE: keep a reference: a collected iterator closes
            for _ in range(5):
                await anext(lines)
            with pytest.raises(httpx.ReadTimeout):   # queued behind it (one at a time), then cut
                await client.post("/v1/chat/completions", json=dict(LONG, stream=True), timeout=0.3,
                                  headers={**gateway.headers(tenant), "x-session-id": f"{session}-queued"})
            assert await wait_until(lambda: limiter.num_queued == 0, 3.0)
        assert await wait_until(lambda: limiter.num_active == 0, 5.0)
        deadline_s = time.monotonic() + 5
        while (after := await scrape()).get("stepahead_requests_499", 0) < before.get("stepahead_requests_499", 0) + 2:
            assert time.monotonic() < deadline_s, after
            await asyncio.sleep(0.05)
    deadline_s = time.monotonic() + 15
    while not (steps := list_steps(tracer.store_path, tenant, session)["data"]):
        assert time.monotonic() < deadline_s, "the cut step was not traced"
        tracer.flush(1)
        await asyncio.sleep(0.05)
    (step,) = steps
    assert step["error"] == "client_closed" and step["worker"] is not None and step["num_output_tokens"] > 0

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert delta("vllm:prompt_tokens") == delta("vllm:prefix_cache_queries") == step["num_input_tokens"] > 0
    assert delta("vllm:prefix_cache_hits") == step["num_cached_tokens"]
    assert delta("vllm:generation_tokens") == step["num_output_tokens"]
    assert delta("vllm:time_to_first_token_seconds_count") == 1   # the queued one had no first token
    assert delta("vllm:request_success") == 0
    assert limiter.num_spent_tokens - spent_before == step["num_input_tokens"] + step["num_output_tokens"]
