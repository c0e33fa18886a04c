"""Through the gateway (needs the FI18 gateway/routes.py diff): an upstream embeddings
request's charge counts in `vllm:prompt_tokens_total`, and an upstream 429 charges nothing."""
from __future__ import annotations

import httpx
import pytest

TENANT = "beta"


def _prompt_tokens(gateway, model: str) -> float:
    labels = (("tenant", TENANT), ("model_name", model), ("worker", "upstream"))
    return gateway.state.metrics.counters.get(("vllm:prompt_tokens_total", labels), 0.0)


@pytest.mark.parametrize("first, answered", [("a b c", 200), ("status:429", 429), ("status:500", 502)])
def test_an_upstream_embeddings_charge_counts_as_prompt_tokens(gateway, first, answered):
    from gateway.embeddings import EmbeddingsRequest

    limiter = gateway.state.limiters[TENANT]
    inputs = [first, "another input"]
    before, counted_before = limiter.num_spent_tokens, _prompt_tokens(gateway, "fake")
    reply = httpx.post(f"{gateway.base_url}/v1/embeddings", timeout=30, headers=gateway.headers(TENANT),
                       json={"model": "fake", "input": inputs})
    assert reply.status_code == answered, reply.text
    charged, counted = limiter.num_spent_tokens - before, _prompt_tokens(gateway, "fake") - counted_before
    expected = {200: reply.json().get("usage", {}).get("total_tokens"), 429: 0,
                502: EmbeddingsRequest(model="fake", input=inputs).estimated_tokens()}[answered]
    assert charged == counted == expected, (charged, counted, expected)
