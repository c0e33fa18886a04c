"""What a request that did not finish is charged, and counts in the token metrics (QA97
finding 3): the same numbers (`Exchange.unfinished_usage`). An upstream stream cut after
its first event pays, and counts, its prompt estimate for each call started and a token a
delta sent; a failure whose answer says the model did no work (a 4xx such as an upstream's
429, a connection never made, a refusal of the gateway's own key) charges and counts
nothing, so a client's retry does not pay twice; a failure that may come after work (a
5xx, a timeout) pays, and counts, the prompt estimate."""
from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace

import httpx
import pytest

from gateway.backend import Prepared, TextDelta
from gateway.choices import with_choices
from gateway.errors import ApiError
from gateway.exchange import CLIENT_CLOSED_STATUS, Exchange
from gateway.limits import Ticket
from gateway.metrics import Registry

TENANT, MODEL, PROMPT_ESTIMATE = "t", "m", 21


class _Limiter:
    def __init__(self) -> None:
        self.charged: list[int] = []

    def release(self, ticket: Ticket, num_used_tokens: int) -> None:
        self.charged.append(num_used_tokens)


def _exchange(*, upstream: bool = True, n: int = 1) -> tuple[Exchange, _Limiter, Registry]:
    limiter, registry = _Limiter(), Registry()
    state = SimpleNamespace(limiters={TENANT: limiter}, metrics=registry, backends={})
    prepared = with_choices(Prepared("req", TENANT, MODEL, num_prompt_tokens=PROMPT_ESTIMATE,
                                     num_reserved_tokens=PROMPT_ESTIMATE + 50, prompt_is_counted=not upstream), n)
    exchange = Exchange(state, prepared, "chat", time.perf_counter())
    exchange.ticket = Ticket(TENANT, prepared.num_reserved_tokens)
    return exchange, limiter, registry


def _receive(exchange: Exchange, num_deltas: int) -> None:
    async def events():
        for index in range(num_deltas):
            yield TextDelta(f"w{index} ")

    async def main():
        stream = events()
        for _ in range(num_deltas):
            await exchange.next_event(stream)
    asyncio.run(main())


def _tokens(registry: Registry, worker: str = "upstream") -> tuple[float, float]:
    labels = (("tenant", TENANT), ("model_name", MODEL), ("worker", worker))
    return (registry.counters.get(("vllm:prompt_tokens_total", labels), 0.0),
            registry.counters.get(("vllm:generation_tokens_total", labels), 0.0))


def test_an_upstream_stream_its_client_cut_counts_in_the_metrics_what_it_is_charged():
    exchange, limiter, registry = _exchange()
    _receive(exchange, 3)
    exchange.close(None, CLIENT_CLOSED_STATUS)
    assert limiter.charged == [PROMPT_ESTIMATE + 3]
    assert _tokens(registry) == (PROMPT_ESTIMATE, 3)
    assert registry.histograms, "its time to first token counts too"


def test_a_cut_upstream_request_of_n_choices_counts_every_started_calls_prompt():
    exchange, limiter, registry = _exchange(n=3)
    _receive(exchange, 2)
    exchange.close(None, CLIENT_CLOSED_STATUS)
    assert limiter.charged == [3 * PROMPT_ESTIMATE + 2]
    assert _tokens(registry) == (3 * PROMPT_ESTIMATE, 2)


def test_an_upstream_request_of_n_choices_cut_before_its_first_event_counts_every_calls_prompt():
    """An upstream model's choices all start at once (gateway/choices.py, FI49): cut before
    any event came, each of the n calls may have been billed its prompt (it counted one)."""
    exchange, limiter, registry = _exchange(n=3)
    exchange.close(None, CLIENT_CLOSED_STATUS)
    assert limiter.charged == [3 * PROMPT_ESTIMATE]
    assert _tokens(registry) == (3 * PROMPT_ESTIMATE, 0)


UNWORKED = {
    "upstream 429": ApiError(429, "Rate limit reached.", "rate_limit_error", "rate_limit_exceeded",
                             headers={"Retry-After": "30"}),
    "upstream 400": ApiError(400, "Invalid value for 'temperature'.", "invalid_request_error", "invalid_value"),
    "never connected": ApiError(502, "Upstream unreachable: APIConnectionError", "server_error",
                                "upstream_unavailable"),
    "gateway's key refused": ApiError(502, "The upstream provider rejected the gateway's credentials.",
                                      "server_error", "upstream_auth_error", None, {"x-should-retry": "false"}),
    "unknown upstream model": ApiError(502, "Upstream error: the upstream does not know the model", "server_error",
                                       "upstream_error", None, {"x-should-retry": "false"}),
}
WORKED = {
    "upstream 500": ApiError(502, "Upstream error: The server had an error.", "server_error", "upstream_error"),
    "timeout": ApiError(504, "Upstream timed out: Timeout", "server_error", "upstream_timeout"),
    "upstream 503": ApiError(503, "Upstream unavailable: Overloaded.", "server_error", "upstream_unavailable"),
}


@pytest.mark.parametrize("name", sorted(UNWORKED))
def test_an_upstream_failure_that_says_no_work_was_done_charges_and_counts_nothing(name):
    error = UNWORKED[name]
    exchange, limiter, registry = _exchange()
    exchange.fail(error)
    exchange.close(None, None)
    assert limiter.charged == [0]
    assert _tokens(registry) == (0, 0) and not registry.histograms


@pytest.mark.parametrize("name", sorted(WORKED))
def test_an_upstream_failure_after_possible_work_charges_and_counts_the_prompt_estimate(name):
    error = WORKED[name]
    exchange, limiter, registry = _exchange()
    exchange.fail(error)
    exchange.close(None, None)
    assert limiter.charged == [PROMPT_ESTIMATE]
    assert _tokens(registry) == (PROMPT_ESTIMATE, 0)


def test_a_refusal_after_the_first_event_still_charges_what_was_sent():
    """Once the upstream answered it has worked, whatever the error that ends the stream."""
    exchange, limiter, registry = _exchange()
    _receive(exchange, 2)
    exchange.fail(UNWORKED["upstream 429"])
    exchange.close(None, 429)
    assert limiter.charged == [PROMPT_ESTIMATE + 2]
    assert _tokens(registry) == (PROMPT_ESTIMATE, 2)


def test_a_local_request_its_engine_refused_before_any_run_charges_nothing():
    """A full engine queue (429) before any run started: no work, no charge."""
    exchange, limiter, registry = _exchange(upstream=False)
    exchange.fail(ApiError(429, "The model's queue for this tenant is full.", "rate_limit_error",
                           "rate_limit_exceeded"))
    exchange.close(None, None)
    assert limiter.charged == [0]
    assert not registry.counters


@pytest.mark.parametrize("code", ["overloaded", "shutting_down"])
def test_a_local_request_its_engine_never_ran_charges_nothing(code):
    """QA101: a request whose engine queue wait ran out (503 `overloaded`, which clients
    retry) was charged its whole prompt each time."""
    exchange, limiter, registry = _exchange(upstream=False)
    exchange.fail(ApiError(503, "The model is unavailable: waited too long.", "server_error", code))
    exchange.close(None, None)
    assert limiter.charged == [0]
    assert not registry.counters


def test_an_upstream_that_closed_the_connection_without_an_answer_may_have_worked():
    """QA101: a passthrough upstream that took the request, worked 3 s and closed the
    connection was 'unreachable' and charged nothing: it is an upstream_error, charged."""
    import aiohttp

    from gateway.exchange import did_no_work
    from gateway.litellm_errors import map_litellm_error

    error = map_litellm_error(aiohttp.ServerDisconnectedError(), quote=False)
    assert (error.status, error.code) == (502, "upstream_error") and not did_no_work(error)


def test_a_local_run_that_started_is_charged_and_counts_its_own_counts():
    exchange, limiter, registry = _exchange(upstream=False)
    exchange.prepared.generated.run_started("w0", 5, is_prompt_head=True)
    exchange.prepared.generated.num = 4
    _receive(exchange, 4)
    exchange.close(None, CLIENT_CLOSED_STATUS)
    assert limiter.charged == [PROMPT_ESTIMATE + 4]
    assert _tokens(registry, "w0") == (PROMPT_ESTIMATE, 4)


def test_an_upstream_request_cut_at_shutdown_charges_nothing_but_counts_as_work():
    exchange, limiter, registry = _exchange()
    _receive(exchange, 2)
    exchange.cut_at_shutdown(ApiError(503, "The server is shutting down.", "server_error", "server_shutting_down"))
    exchange.close(None, 503)
    assert limiter.charged == [0]
    assert _tokens(registry) == (PROMPT_ESTIMATE, 2)


def test_the_rule_tells_refusals_from_failures_that_may_come_after_work():
    from gateway.exchange import did_no_work

    assert all(did_no_work(error) for error in UNWORKED.values())
    assert not any(did_no_work(error) for error in WORKED.values())


# through the gateway and the fake upstream (tests/gateway/fake_openai.py)

APP_TENANT = "beta"


def _spent(gateway) -> int:
    return gateway.state.limiters[APP_TENANT].num_spent_tokens


def _app_tokens(gateway, model: str) -> float:
    labels = (("tenant", APP_TENANT), ("model_name", model), ("worker", "upstream"))
    counters = gateway.state.metrics.counters
    return (counters.get(("vllm:prompt_tokens_total", labels), 0.0)
            + counters.get(("vllm:generation_tokens_total", labels), 0.0))


@pytest.mark.parametrize("model", ["fake", "fake-direct"])
def test_an_upstream_429_charges_nothing_and_a_500_charges_what_the_metrics_count(gateway, model):
    from gateway.upstream import estimate_num_tokens

    charges = {}
    for text, answered in (("status:429", 429), ("status:500", 502)):
        messages = [{"role": "user", "content": text}]
        before, counted_before = _spent(gateway), _app_tokens(gateway, model)
        reply = httpx.post(f"{gateway.base_url}/v1/chat/completions", timeout=30, headers=gateway.headers(APP_TENANT),
                           json={"model": model, "messages": messages, "max_tokens": 8})
        assert reply.status_code == answered, reply.text
        # a whole reply's failure is charged before its answer is sent
        charges[text] = (_spent(gateway) - before, _app_tokens(gateway, model) - counted_before,
                         estimate_num_tokens(messages))
    assert charges["status:429"][:2] == (0, 0)
    charged, counted, estimate = charges["status:500"]
    assert charged == counted == estimate


@pytest.mark.parametrize("model", ["fake", "fake-direct"])
def test_an_upstream_stream_its_client_cut_counts_what_it_is_charged(gateway, model):
    limiter = gateway.state.limiters[APP_TENANT]
    before, counted_before = _spent(gateway), _app_tokens(gateway, model)
    with httpx.stream("POST", f"{gateway.base_url}/v1/chat/completions", timeout=30,
                      headers=gateway.headers(APP_TENANT),
                      json={"model": model, "messages": [{"role": "user", "content": "slow"}], "stream": True}) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                break
    deadline_s = time.monotonic() + 10
    while limiter.num_active and time.monotonic() < deadline_s:
        time.sleep(0.02)
    while _spent(gateway) == before and time.monotonic() < deadline_s:
        time.sleep(0.02)
    charged, counted = _spent(gateway) - before, _app_tokens(gateway, model) - counted_before
    assert charged > 0 and counted == charged, (charged, counted)
