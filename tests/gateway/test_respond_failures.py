"""A reply that fails for a reason no check caught (a bug, an upstream's answer of the
wrong shape) is an OpenAI-shaped 500 with the request's id, counted as a 500, and the
tenant's slot is released on every path. Tenant "faults" is these tests' own: no other
test's request holds one of its slots."""
from __future__ import annotations

import asyncio

import httpx
import pytest

from gateway.backend import Finished, TextDelta, Usage
from gateway.local import LocalBackend

BODY = {"model": "tiny", "messages": [{"role": "user", "content": "Say something."}], "max_tokens": 4}


@pytest.fixture
def broken_runs(monkeypatch):
    """LocalBackend.run as a backend with a bug: it raises before any event ("raise"), or
    finishes with a usage whose count is no number ("bad_usage")."""
    mode = {"value": "raise"}

    async def run(self, prepared):
        if mode["value"] == "raise":
            raise RuntimeError("a bug in the backend")
        yield TextDelta("some text")
        yield Finished("stop", Usage("abc", 2, 0), worker="w0", ttft_s=0.01)   # type: ignore[arg-type]

    monkeypatch.setattr(LocalBackend, "run", run)
    return mode


async def released(limiter) -> bool:
    """Whether the tenant's slots are all free within 5 s (a stream's end reaches the
    client a moment before the server's bookkeeping of it)."""
    for _ in range(100):
        if limiter.num_active == 0 and limiter.num_queued == 0:
            return True
        await asyncio.sleep(0.05)
    return False


@pytest.mark.parametrize("mode", ["raise", "bad_usage"])
async def test_an_unexpected_failure_is_a_500_with_the_request_id_and_releases_the_slot(gateway, broken_runs, mode):
    broken_runs["value"] = mode
    limiter = gateway.state.limiters["faults"]
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
        for _ in range(3):
            answer = await client.post("/v1/chat/completions", json=BODY, headers=gateway.headers("faults"))
            assert answer.status_code == 500, answer.text
            assert answer.json()["error"]["type"] == "server_error"
            assert answer.headers["x-request-id"].startswith("chatcmpl")
        metrics = (await client.get("/metrics", headers=gateway.headers("faults"))).text
    assert limiter.num_active == 0 and limiter.num_queued == 0
    assert 'endpoint="chat",status="500"' in metrics


async def test_a_stream_whose_usage_cannot_be_summed_still_releases_the_slot(gateway, broken_runs):
    broken_runs["value"] = "bad_usage"
    limiter = gateway.state.limiters["faults"]
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
        async with client.stream("POST", "/v1/chat/completions", json={**BODY, "stream": True},
                                 headers=gateway.headers("faults")) as answer:
            text = (await answer.aread()).decode()
    assert answer.status_code == 200 and "some text" in text
    assert await released(limiter)
