"""An upstream's rate limit sent as an error event inside a stream reaches the tenant in the
gateway's words, as one sent as a 429 status does (QA185 F3; the passthrough gave it as a
502 quoting the upstream: the operator's organisation and all tenants' usage); and every
upstream 429 is logged for the operator, in the upstream's words, once a minute per model."""
import json
import logging

import pytest

from gateway.errors import ApiError
from gateway.litellm_errors import map_upstream_status, redacted
from tests.gateway.fake_openai import request_body
from tests.gateway.serving import start_server
from tests.gateway.test_upstream_faults import PATHS, ask, backend, base_url  # noqa: F401 (a fixture)
from tests.gateway.test_upstream_rate_limit_words import ORG, RATE, TOO_LARGE, assert_gateways_words

RATE_WORDS = "The upstream provider is rate limiting this gateway's requests for this model; retry after 1 s."
LOGGER = "stepahead.gateway"


def _chunk(delta: dict) -> bytes:
    return b"data: " + json.dumps({"id": "chatcmpl-rl", "object": "chat.completion.chunk", "created": 1,
                                   "model": "fake", "choices": [{"index": 0, "delta": delta,
                                                                 "finish_reason": None}]}).encode() + b"\n\n"


async def app(scope, receive, send) -> None:
    """A 200 stream whose error event is OpenAI's rate limit: "rate" after a first delta,
    "rate-first" before any, "too-large" (one request over the per-minute limit),
    "rate-numbered" (OpenRouter's numbered code, its type none)."""
    raw = await request_body(scope, receive, send)
    if raw is None:
        return
    text = json.loads(raw)["messages"][-1]["content"]
    error = {"too-large": TOO_LARGE, "rate-numbered": {"message": RATE["message"], "code": 429}}.get(text, RATE)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    parts = [] if text == "rate-first" else [_chunk({"role": "assistant", "content": "a"})]
    parts.append(b"data: " + json.dumps({"error": error}).encode() + b"\n\n")
    for part in parts:
        await send({"type": "http.response.body", "body": part, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


@pytest.fixture(scope="module")
def midstream_url():
    server = start_server(app)
    yield f"{server.base_url}/v1"
    server.stop()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("text", ["rate", "rate-first"])
def test_a_rate_limit_event_inside_a_stream_is_told_in_the_gateways_words(midstream_url, path, text):
    _, error, _ = ask(path, midstream_url, text, stream=True)
    assert_gateways_words(error)
    assert error.message == RATE_WORDS


def test_a_numbered_rate_limit_event_is_one_too(midstream_url):
    _, error, _ = ask("pass", midstream_url, "rate-numbered", stream=True)
    assert_gateways_words(error)
    assert error.message == RATE_WORDS


@pytest.mark.parametrize("path", PATHS)
def test_a_request_too_large_event_inside_a_stream_says_send_fewer_tokens(midstream_url, path):
    _, error, _ = ask(path, midstream_url, "too-large", stream=True)
    assert_gateways_words(error)
    assert "send fewer tokens" in error.message and error.headers == {"x-should-retry": "false"}


def test_only_a_rate_limit_event_is_a_429():
    from gateway.litellm_causes import error_object_status as _event_status   # (both paths' rule)

    assert _event_status({"code": "rate_limit_exceeded", "type": "tokens"}) == 429
    assert _event_status({"type": "rate_limit_error"}) == 429
    assert _event_status({"code": 429}) == 429
    for other in ({"message": "boom", "type": "server_error"}, {}, {"code": ["rate_limit_exceeded"]},
                  {"code": "insufficient_quota"}):
        assert _event_status(other) == 502


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_429_is_logged_in_its_own_words_with_the_model(midstream_url, path, stream, caplog):
    from tests.gateway.test_upstream_rate_limit_words import app as status_app

    server = start_server(status_app)
    try:
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            _, error, _ = (ask(path, midstream_url, "rate", stream=True) if stream
                           else ask(path, f"{server.base_url}/v1", "rate"))
    finally:
        server.stop()
    assert ORG not in error.message
    lines = [r for r in caplog.records if "upstream rate limit" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    line = lines[0].getMessage()
    assert f"model {path}:" in line and "429" in line
    assert f"Rate limit reached for gpt-4o-mini in organization {ORG}" in line and "Used 199500" in line
    assert "https://" not in line and "\n" not in line


def test_the_log_is_once_a_minute_per_model_and_counts_the_rest(caplog):
    from gateway.upstream_rate_limits import UpstreamRateLimits

    now = [1000.0]
    rate = map_upstream_status(429, RATE["message"], "rate_limit_exceeded", retry_after="3")
    too_large = map_upstream_status(429, TOO_LARGE["message"], "rate_limit_exceeded")
    limits = {name: UpstreamRateLimits(name, clock=lambda: now[0]) for name in ("gpt", "other")}
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for error in (rate, too_large, rate):
            limits["gpt"].note(error)
        limits["other"].note(rate)   # another model's is its own
        limits["gpt"].note(ApiError(502, "Upstream error: boom", "server_error", "upstream_error"))   # not a 429
        now[0] += 59.0
        limits["gpt"].note(rate)
        now[0] += 1.5
        limits["gpt"].note(too_large)
    lines = [r.getMessage() for r in caplog.records if "upstream rate limit" in r.getMessage()]
    assert len(lines) == 3, lines
    assert lines[0].startswith("stepahead: upstream rate limit: model gpt: the upstream answered 429: Rate limit")
    assert lines[1].startswith("stepahead: upstream rate limit: model other:")
    assert "Request too large" in lines[2] and "(also 3 more time(s) since the last report, not logged)" in lines[2]


def test_the_logged_words_lose_the_models_key_and_any_bearer_value(caplog):
    from gateway.upstream_rate_limits import UpstreamRateLimits

    key = "sk-upstream-SECRET-0123456789"
    error = map_upstream_status(429, f"Rate limit for key {key[:12]}****; sent Authorization: Bearer {key}",
                                "rate_limit_exceeded")
    error = redacted(error, (key,))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        UpstreamRateLimits("m\nforged line").note(error)
    (line,) = [r.getMessage() for r in caplog.records if "upstream rate limit" in r.getMessage()]
    assert "SECRET" not in line and key[:12] not in line and "\n" not in line
    assert "model m\\nforged line:" in line


def test_an_embeddings_429_is_logged_too(base_url, caplog):
    import asyncio

    from gateway.embeddings import EmbeddingsRequest
    from gateway.schemas import validate

    async def embed():
        up = backend("lite", base_url)
        await up.start()
        return await up.embed(validate(EmbeddingsRequest, {"model": "lite", "input": "status:429"}))
    with caplog.at_level(logging.WARNING, logger=LOGGER), pytest.raises(ApiError) as caught:
        asyncio.run(embed())
    assert caught.value.status == 429 and "Rate limit reached." not in caught.value.message
    (line,) = [r.getMessage() for r in caplog.records if "upstream rate limit" in r.getMessage()]
    assert line == "stepahead: upstream rate limit: model lite: the upstream answered 429: Rate limit reached."
