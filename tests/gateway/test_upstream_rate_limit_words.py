"""An upstream's 429 reaches the tenant in the gateway's words (QA185 F3): OpenAI's name the
operator's organisation and what all tenants together used ("Used 199500"), a cross-tenant
side channel. The status, the type and code the OpenAI SDK reads as a `RateLimitError`, and
the upstream's wait (`Retry-After`, `retry-after-ms`) are kept, through litellm ("lite") and
forwarded ("pass"), streamed or not."""
import json

import pytest

from gateway.litellm_errors import map_litellm_error, map_upstream_status
from tests.gateway.fake_openai import request_body
from tests.gateway.serving import start_server
from tests.gateway.test_upstream_faults import PATHS, ask, assert_api_error

ORG = "org-OPERATOR123abc"
RATE = {"message": f"Rate limit reached for gpt-4o-mini in organization {ORG} on tokens per min (TPM): "
                   "Limit 200000, Used 199500, Requested 2000. Please try again in 450ms. Visit "
                   "https://platform.openai.com/account/rate-limits to learn more.",
        "type": "tokens", "param": None, "code": "rate_limit_exceeded"}
TOO_LARGE = {"message": f"Request too large for gpt-4o in organization {ORG} on tokens per min (TPM): "
                        "Limit 30000, Requested 36000. The input or output tokens must be reduced in order "
                        "to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.",
             "type": "tokens", "param": None, "code": "rate_limit_exceeded"}
LEAKS = (ORG, "organization", "199500", "200000", "Used", "Limit", "gpt-4o", "platform.openai", "30000")


async def app(scope, receive, send) -> None:
    """A 429 in OpenAI's words: "rate" (with `retry-after-ms: 450` and `Retry-After: 1`),
    "rate-plain" (no wait at all), "too-large" (one request over the per-minute limit)."""
    raw = await request_body(scope, receive, send)
    if raw is None:
        return
    text = json.loads(raw)["messages"][-1]["content"]
    headers = [(b"content-type", b"application/json")]
    if text in ("rate", "too-large"):   # OpenAI sends a wait with "Request too large" too
        headers += [(b"retry-after", b"1"), (b"retry-after-ms", b"450")]
    error = TOO_LARGE if text == "too-large" else RATE
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps({"error": error}).encode()})


@pytest.fixture(scope="module")
def limiting_url():
    server = start_server(app)
    yield f"{server.base_url}/v1"
    server.stop()


def assert_gateways_words(error) -> None:
    assert_api_error(error, 429, "rate_limit_exceeded")
    assert error.type == "rate_limit_error" and error.param is None
    for leak in LEAKS:
        assert leak not in error.message, error.message


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_429_names_neither_the_operators_org_nor_the_shared_usage(limiting_url, path, stream):
    events, error, _ = ask(path, limiting_url, "rate", stream=stream)
    assert events == []
    assert_gateways_words(error)
    assert error.message == ("The upstream provider is rate limiting this gateway's requests for this model; "
                             "retry after 1 s.")
    assert error.headers == {"Retry-After": "1", "retry-after-ms": "450"}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_429_without_a_wait_still_says_the_one_the_client_is_given(limiting_url, path, stream):
    _, error, _ = ask(path, limiting_url, "rate-plain", stream=stream)
    assert_gateways_words(error)
    assert error.headers == {"Retry-After": "1"} and error.message.endswith("retry after 1 s.")


@pytest.mark.parametrize("path", PATHS)
def test_a_request_too_large_for_the_per_minute_limit_is_told_to_send_fewer_tokens(limiting_url, path):
    _, error, _ = ask(path, limiting_url, "too-large")
    assert_gateways_words(error)
    assert "send fewer tokens" in error.message and "retry after" not in error.message
    # waiting cures nothing: never sent again (QA186 F1: the SDK tried 3 times, a batch line until it expired)
    assert error.headers == {"x-should-retry": "false"}


def test_the_mapping_itself_quotes_no_upstream_words():
    error = map_upstream_status(429, RATE["message"], "rate_limit_exceeded", retry_after="7", error_type="tokens")
    assert_gateways_words(error)
    assert error.headers == {"Retry-After": "7"} and error.message.endswith("retry after 7 s.")
    assert map_upstream_status(429, "slow", retry_after_ms="2500").message.endswith("retry after 3 s.")
    # an account out of credit stays the gateway's 503 (not a rate limit)
    assert map_upstream_status(429, "You exceeded your current quota", "insufficient_quota").status == 503


def test_a_litellm_rate_limit_error_quotes_no_upstream_words():
    from litellm.exceptions import RateLimitError

    error = map_litellm_error(RateLimitError(f"litellm.RateLimitError: OpenAIException - {RATE['message']}",
                                             "openai", "fake-model"))
    assert_gateways_words(error)
