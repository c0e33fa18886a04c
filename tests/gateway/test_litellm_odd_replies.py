"""Odd upstream replies answered alike through litellm ("lite") and forwarded ("pass")
(QA147): a 200 whose body is an error object is a 502 `upstream_error` (litellm made it a
422 `upstream_rejected`, the client's fault, which a batch does not retry); a 402 (an
account out of credit, as OpenRouter sends) is the 503 `upstream_quota_exceeded` an
`insufficient_quota` 429 is, with `x-should-retry: false` (was a retryable 502); a 408 or
504 whose body is not JSON says "HTTP 408", without litellm's "Timeout Error:
OpenAIException - Error code: 408"."""
import json
import os

import pytest

from gateway.batch_retry import is_sent_again
from gateway.litellm_odd_replies import error_in_200, own_words
from tests.gateway.fake_openai import request_body
from tests.gateway.serving import served_url
from tests.gateway.test_upstream_faults import KEY_ENV, PATHS, ask, assert_api_error

CREDIT = {"message": "Insufficient credits. Add more using https://openrouter.ai/settings/credits", "code": 402}
REPLIES = {   # the prompt -> the upstream's status, content type and body
    "error-200": (200, "application/json", {"error": {"message": "oops in body", "type": "server_error"}}),
    "error-200-coded": (200, "application/json", {"error": {"message": "bad thing", "code": "invalid_value",
                                                            "type": "invalid_request_error", "param": "x"}}),
    "error-200-text": (200, "application/json", {"error": "plain words"}),
    "credit-402": (402, "application/json", {"error": CREDIT}),
    "credit-402-text": (402, "text/plain", "Payment Required"),
    "timeout-408-text": (408, "text/plain", "Request Timeout"),
    "timeout-504-empty": (504, "text/plain", ""),
    "timeout-504-html": (504, "text/html", "<html><body>Gateway Timeout at /srv/lb</body></html>"),
    "unavailable-503-empty": (503, "text/plain", ""),
}


async def app(scope, receive, send) -> None:
    raw = await request_body(scope, receive, send)
    if raw is None:
        return
    status, content_type, body = REPLIES[json.loads(raw)["messages"][-1]["content"]]
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode())]})
    raw_body = body if isinstance(body, str) else json.dumps(body)
    await send({"type": "http.response.body", "body": raw_body.encode()})


@pytest.fixture(scope="module")
def base_url():
    os.environ.setdefault(KEY_ENV, "sk-upstream-secret")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    yield from served_url(app)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("text, said", [("error-200", "oops in body"), ("error-200-coded", "bad thing")])
def test_a_200_whose_body_is_an_error_is_a_502_on_both_paths(base_url, path, text, said):
    events, error, _ = ask(path, base_url, text)
    assert events == []
    assert_api_error(error, 502, "upstream_error")   # QA147: a 422 upstream_rejected through litellm
    assert error.message == f"Upstream error: the upstream's reply is malformed (an error with status 200: {said})."
    assert not is_sent_again(error)   # as any other 502 of the upstream's


def test_a_200_whose_error_is_no_object_is_a_502_through_litellm(base_url):
    _, error, _ = ask("lite", base_url, "error-200-text")   # (litellm keeps none of its words)
    assert_api_error(error, 502, "upstream_error")
    assert error.message == "Upstream error: the upstream's reply is malformed (an error with status 200)."
    _, error, _ = ask("pass", base_url, "error-200-text")
    assert_api_error(error, 502, "upstream_error")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("text", ["credit-402", "credit-402-text"])
@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_402_is_the_operators_quota_not_a_retryable_502(base_url, path, text, stream):
    events, error, _ = ask(path, base_url, text, stream=stream)
    assert events == []
    assert_api_error(error, 503, "upstream_quota_exceeded")   # QA147: a plain 502 upstream_error
    assert error.headers == {"x-should-retry": "false"}   # no Retry-After: waiting does not cure it
    assert "openrouter" not in error.message and "contact the operator" in error.message
    assert not is_sent_again(error)   # a batch line gets it as its result at once


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("text, status", [("timeout-408-text", 408), ("timeout-504-empty", 504),
                                          ("timeout-504-html", 504)])
def test_a_timeout_status_without_json_says_its_status_without_litellms_words(base_url, path, text, status):
    _, error, _ = ask(path, base_url, text)
    assert_api_error(error, 504, "upstream_timeout")
    assert error.message == f"Upstream timed out: HTTP {status}"   # QA147: "Timeout Error: OpenAIException - ..."


@pytest.mark.parametrize("path", PATHS)
def test_another_status_without_json_says_its_status_as_passthrough_does(base_url, path):
    _, error, _ = ask(path, base_url, "unavailable-503-empty")
    assert_api_error(error, 503, "upstream_unavailable")
    assert error.message == "Upstream unavailable: HTTP 503"


def test_only_litellms_answer_to_an_error_object_in_a_200_is_read_as_one():
    made_up = Exception()
    made_up.status_code, made_up.message = 422, "Error in response object"
    assert error_in_200([RuntimeError("wrapped"), made_up]) == ""
    made_up.message = "oops"
    assert error_in_200([made_up]) == "oops"
    assert error_in_200([Exception("plain"), ValueError("x")]) is None   # no status_code: not litellm's


def test_an_unknown_exception_keeps_its_own_words():
    assert own_words(RuntimeError("boom")) is None
    assert own_words(RuntimeError("Error code: 418")) is None   # not litellm's wrapper
