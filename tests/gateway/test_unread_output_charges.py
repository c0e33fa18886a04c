"""A local stream whose client stops reading (QA150 finding 1) is charged, and counts in the
token metrics, every token its worker generated, those still queued unread in the engine
included, not only those the reply read (`GeneratedTokens.num_generated`); one left
unread past the engine's bound is cut, its worker stopped, and fails as a client that
left (499) saying why, charged what was generated. Real engine on the tiny model; the
reply is driven as gateway/respond.py drives it, without a socket."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from gateway.backend import GeneratedTokens, Prepared, TextDelta
from gateway.choices import run_choices, with_choices
from gateway.config import LocalModelConfig
from gateway.errors import ApiError
from gateway.exchange import CLIENT_CLOSED_STATUS, Exchange
from gateway.limits import Ticket
from gateway.local import LocalBackend
from gateway.metrics import Registry
from gateway.schemas import ChatCompletionRequest, validate
from shards.engine_streams import READ_TOO_SLOWLY

TENANT, MODEL = "t", "m"


class _Limiter:
    def __init__(self) -> None:
        self.charged: list[int] = []

    def release(self, ticket: Ticket, num_used_tokens: int) -> None:
        self.charged.append(num_used_tokens)


@pytest.fixture
async def local():
    backend = LocalBackend(LocalModelConfig(name=MODEL, path="tiny", num_workers=1))
    await backend.start()
    try:
        yield backend
    finally:
        await backend.stop()


async def _exchange(local: LocalBackend, max_tokens: int) -> tuple[Exchange, _Limiter, Registry]:
    request = validate(ChatCompletionRequest, {
        "model": MODEL, "max_tokens": max_tokens, "temperature": 0, "stream": True, "ignore_eos": True,
        "messages": [{"role": "user", "content": "Tell me a long story."}]})
    prepared = await local.prepare_chat(request, TENANT, "req")
    limiter, registry = _Limiter(), Registry()
    state = SimpleNamespace(limiters={TENANT: limiter}, metrics=registry, backends={})
    exchange = Exchange(state, prepared, "chat", time.perf_counter(), is_streamed=True)
    exchange.ticket = Ticket(TENANT, prepared.num_reserved_tokens)
    return exchange, limiter, registry


async def _decoded_once_idle(engine, before: int) -> int:
    """The tokens the worker decoded since `before` (its `num_decoded_tokens`), once it
    decoded some and then runs nothing: finished, or stopped."""
    deadline = time.monotonic() + 40.0
    while time.monotonic() < deadline:
        await engine.refresh_stats()
        row = engine.metrics()[0]
        if row.get("num_decoded_tokens", 0) > before and row["num_running"] == 0:
            return row["num_decoded_tokens"] - before
    raise AssertionError("the worker was still decoding")


async def _decoded(engine) -> int:
    await engine.refresh_stats()
    return engine.metrics()[0].get("num_decoded_tokens", 0)


def _generation_tokens(registry: Registry) -> float:
    return sum(value for (name, _), value in registry.counters.items() if name == "vllm:generation_tokens_total")


async def test_a_stream_its_client_stopped_reading_is_charged_every_token_its_worker_generated(local):
    exchange, limiter, registry = await _exchange(local, 40)
    prepared = exchange.prepared
    before = await _decoded(local.engine)
    events = local.run(prepared)
    first = await exchange.next_event(events)   # then the client reads nothing more
    assert isinstance(first, TextDelta)
    assert await _decoded_once_idle(local.engine, before) == 39   # the whole reply (its first token: the prefill's)
    await events.aclose()   # the stall cut (or the client leaving) closes the reply
    assert prepared.generated.num < 40, "the reply itself read only a few tokens"
    assert prepared.usage_so_far().num_completion_tokens == 40
    assert "40 output tokens generated" in exchange._client_closed_message()
    exchange.close(None, CLIENT_CLOSED_STATUS)
    assert limiter.charged == [prepared.num_prompt_tokens + 40]
    assert _generation_tokens(registry) == 40


async def test_a_stream_left_unread_past_the_bound_stops_its_worker_and_fails_as_a_client_that_left(local):
    local.engine.max_unread_tokens = 8
    exchange, limiter, registry = await _exchange(local, 400)
    prepared = exchange.prepared
    before = await _decoded(local.engine)
    events = local.run(prepared)
    await exchange.next_event(events)
    num_decoded = await _decoded_once_idle(local.engine, before)   # cut: its worker stopped
    assert num_decoded < 100, "it did not decode on toward 400 tokens for nobody"
    num_generated = local.engine.num_generated("req")
    assert 9 <= num_generated <= num_decoded + 1   # the first token came from the prefill
    with pytest.raises(ApiError) as failure:   # the client reads again: what was queued, then why it ended
        while True:
            await exchange.next_event(events)
    await events.aclose()
    error = failure.value
    assert (error.status, error.code) == (CLIENT_CLOSED_STATUS, READ_TOO_SLOWLY)
    assert "more than 8 tokens waited unread" in error.message and "worker failed" not in error.message
    exchange.fail(error)   # as gateway/respond.py records a stream's error event
    exchange.close(None, error.status)
    assert prepared.generated.num_generated == prepared.generated.num == num_generated   # all of it was read
    assert limiter.charged == [prepared.num_prompt_tokens + num_generated]
    assert _generation_tokens(registry) == num_generated
    assert not local.engine._streams


def test_the_usage_of_a_cut_request_is_the_larger_of_what_its_reply_read_and_what_its_engine_queued():
    prepared = Prepared("r", TENANT, MODEL, num_prompt_tokens=7, num_reserved_tokens=50,
                        generated=GeneratedTokens(num=3, worker="w0", num_sent=40))
    assert prepared.usage_so_far().num_completion_tokens == 40
    only_read = Prepared("r", TENANT, MODEL, num_prompt_tokens=7, num_reserved_tokens=50,
                         generated=GeneratedTokens(num=5, worker="w0"))   # a run that counts no queue
    assert only_read.usage_so_far().num_completion_tokens == 5


async def test_a_stream_of_two_choices_left_unread_past_the_bound_stops_both_workers_runs(local):
    """`n` = 2: the merged stream stops reading its choices' engine streams when its reader
    stops (gateway/choices.py), so their tokens wait unread in the engine, which cuts them
    past its bound as with one choice; without that the choices were read on into the
    gateway's memory and the worker decoded both toward 400 tokens for nobody."""
    local.engine.max_unread_tokens = 8
    exchange, limiter, registry = await _exchange(local, 400)
    prepared = with_choices(exchange.prepared, 2)
    exchange.prepared = prepared
    before = await _decoded(local.engine)
    events = run_choices(local, prepared)
    await exchange.next_event(events)
    num_decoded = await _decoded_once_idle(local.engine, before)
    assert num_decoded < 400, f"it decoded {num_decoded} tokens, on toward 2 x 400 for nobody"
    with pytest.raises(ApiError) as failure:
        while True:
            await exchange.next_event(events)
    await events.aclose()
    assert (failure.value.status, failure.value.code) == (CLIENT_CLOSED_STATUS, READ_TOO_SLOWLY)
    assert not local.engine._streams


@pytest.mark.parametrize(("num_tokens", "words"), [(1, ", 1 output token generated."), (2, ", 2 output tokens generated."),
                                                   (0, "streaming.")])
def test_the_client_closed_message_counts_its_tokens_in_words(num_tokens, words):
    exchange = SimpleNamespace(ticket=object(), first_event_s=1.0, is_streamed=True,
                               prepared=SimpleNamespace(generated=GeneratedTokens(num=num_tokens)))
    assert Exchange._client_closed_message(exchange).endswith(words)
