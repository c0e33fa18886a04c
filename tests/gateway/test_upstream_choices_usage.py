"""`n` > 1 on an upstream model: one upstream call per choice, each billed its whole prompt,
so the request reserves, and its usage counts, every choice's prompt (gateway/choices.py);
a local model's request still counts each prompt once."""
import asyncio
import json
import time

import httpx
import pytest

from gateway.backend import Finished, Prepared, TextDelta, Usage
from gateway.choices import merged_usage, run_choices, with_choices
from gateway.collected import Reply

TENANT = "beta"
PROMPT = [{"role": "user", "content": "a b"}]
# the fake upstream's usage of each call: "a b" is 2 words + 3 prompt tokens, 2 of them cached,
# and its reply "echo: a b" 3 completion tokens
CALL_PROMPT, CALL_CACHED, CALL_COMPLETION = 5, 2, 3


class OneWordBackend:
    """Each run sends one word, then finishes with 10 prompt tokens (4 of them cached)."""

    async def run(self, prepared: Prepared):
        yield TextDelta(f"w{prepared.choice}")
        yield Finished("stop", Usage(10, 1, 4), "upstream" if not prepared.prompt_is_counted else "w0")


def request(n: int, *, upstream: bool) -> Prepared:
    return with_choices(Prepared("req", "alpha", "m", num_prompt_tokens=10, num_reserved_tokens=30,
                                 prompt_is_counted=not upstream), n)


def merged(n: int, *, upstream: bool) -> Usage:
    async def main():
        reply = Reply.of(n)
        async for event in run_choices(OneWordBackend(), request(n, upstream=upstream)):
            reply.add(event)
        return reply.finished.usage
    return asyncio.run(main())


def test_an_upstream_request_reserves_every_choices_prompt_a_local_one_each_prompt_once():
    assert request(4, upstream=True).num_reserved_tokens == 4 * (10 + 20)
    assert request(4, upstream=False).num_reserved_tokens == 10 + 4 * 20
    assert request(1, upstream=True).num_reserved_tokens == 30


def test_an_upstream_requests_usage_counts_every_choices_prompt_a_local_ones_the_prompt_once():
    upstream = merged(4, upstream=True)
    assert (upstream.num_prompt_tokens, upstream.num_completion_tokens, upstream.num_cached_tokens) == (40, 4, 16)
    local = merged(4, upstream=False)
    assert (local.num_prompt_tokens, local.num_completion_tokens, local.num_cached_tokens) == (10, 4, 4)


def test_merged_usage_counts_the_prompt_of_each_choice_that_paid_its_own():
    finishes = [Finished("stop", Usage(7, 2, 3), choice=0, pays_own_prompt=True),
                Finished("length", Usage(7, 5, 1), choice=1, pays_own_prompt=True)]
    usage = merged_usage(finishes).usage
    assert (usage.num_prompt_tokens, usage.num_cached_tokens, usage.num_total_tokens) == (14, 4, 21)


def _spent(gateway) -> int:
    return gateway.state.limiters[TENANT].num_spent_tokens


def _prompt_tokens_metric(gateway, model: str) -> float:
    labels = (("tenant", TENANT), ("model_name", model), ("worker", "upstream"))
    return gateway.state.metrics.counters.get(("vllm:prompt_tokens_total", labels), 0.0)


def _settled(gateway, before: int) -> int:
    """What the tenant was charged since `before`, once the request's charge landed."""
    deadline = time.monotonic() + 5.0
    while _spent(gateway) == before and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.05)
    return _spent(gateway) - before


def _streamed_usage(gateway, body: dict) -> dict:
    with httpx.stream("POST", f"{gateway.base_url}/v1/chat/completions", json=body, timeout=30,
                      headers=gateway.headers(TENANT)) as reply:
        assert reply.status_code == 200
        chunks = [json.loads(line[5:]) for line in reply.iter_lines()
                  if line.startswith("data:") and line[5:].strip() != "[DONE]"]
    return next(chunk["usage"] for chunk in chunks if chunk.get("usage"))


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", ["fake", "fake-direct"])
def test_n_upstream_calls_are_each_charged_their_prompt(gateway, model, stream):
    n = 3
    body = {"model": model, "messages": PROMPT, "n": n}
    before, metric_before = _spent(gateway), _prompt_tokens_metric(gateway, model)
    if stream:
        usage = _streamed_usage(gateway, {**body, "stream": True, "stream_options": {"include_usage": True}})
    else:
        reply = httpx.post(f"{gateway.base_url}/v1/chat/completions", json=body, timeout=30,
                           headers=gateway.headers(TENANT))
        assert reply.status_code == 200 and len(reply.json()["choices"]) == n
        usage = reply.json()["usage"]
    billed = n * (CALL_PROMPT + CALL_COMPLETION)
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (
        n * CALL_PROMPT, n * CALL_COMPLETION, billed)
    assert usage["prompt_tokens_details"]["cached_tokens"] == n * CALL_CACHED
    assert _settled(gateway, before) == billed   # the tenant's budget pays what the upstream billed
    assert _prompt_tokens_metric(gateway, model) - metric_before == n * CALL_PROMPT


@pytest.mark.parametrize("model", ["fake", "fake-direct"])
def test_a_cut_upstream_request_is_charged_the_prompt_estimate_of_every_call_it_made(gateway, model):
    """A stream of n = 3 its client leaves after the first text: the other choices' calls
    had started (after choice 0's first event), each billed its prompt by the upstream, so
    the tenant pays the prompt estimate three times plus the deltas it was sent."""
    from gateway.upstream import estimate_num_tokens

    messages = [{"role": "user", "content": "slow"}]   # the fake streams it a word every 0.5 s
    before = _spent(gateway)
    with httpx.stream("POST", f"{gateway.base_url}/v1/chat/completions", timeout=30, headers=gateway.headers(TENANT),
                      json={"model": model, "messages": messages, "n": 3, "stream": True}) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                break
    estimate = estimate_num_tokens(messages)
    charged = _settled(gateway, before)
    assert 3 * estimate <= charged <= 3 * estimate + 8, (charged, estimate)
