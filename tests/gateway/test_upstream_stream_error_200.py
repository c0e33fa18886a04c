"""A stream request that the upstream answers 200 with a JSON error object is a 502
`upstream_error` that carries the upstream's own message, as a whole reply's does ("an
error with status 200: <its message>"), through litellm ("lite") and forwarded ("pass")
(QA157 F4): it said only "a stream was asked for, the reply is application/json". litellm's
text completion stream keeps the body to itself: its 502 no longer names a cause that was
not the one ("the stream ended before a finish_reason")."""
import json

import pytest

from gateway.schemas import CompletionRequest, validate
from tests.gateway.fake_openai import request_body
from tests.gateway.serving import served_url
from tests.gateway.test_upstream_faults import PATHS, ask, assert_api_error, drive

SAID = "Internal upstream problem"
REPLIES = {   # the prompt -> the 200 reply's content type and body
    "error": ("application/json", {"error": {"message": SAID, "type": "server_error", "code": "boom"}}),
    "error-text": ("application/json", {"error": "plain words"}),
    "whole": ("application/json", {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
                                   "choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": "hi"}}]}),
    "html": ("text/html", "<html><body>502 at the proxy</body></html>"),
}
MALFORMED = "Upstream error: the upstream's reply is malformed"


async def app(scope, receive, send) -> None:
    raw = await request_body(scope, receive, send)
    if raw is None:
        return
    body = json.loads(raw)
    content_type, reply = REPLIES[body["messages"][-1]["content"] if "messages" in body else body["prompt"]]
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type.encode())]})
    await send({"type": "http.response.body", "body": (reply if isinstance(reply, str) else json.dumps(reply)).encode()})


@pytest.fixture(scope="module")
def base_url():
    yield from served_url(app)


def _complete(path: str, api_base: str, text: str, stream: bool):
    request = validate(CompletionRequest, {"model": path, "prompt": text, "stream": stream})
    return drive(path, api_base, 3.0, lambda up: up.prepare_completion(request, "t", "req-1"))


@pytest.mark.parametrize("path", PATHS)
def test_a_chat_stream_answered_with_a_200_error_carries_its_message(base_url, path):
    events, error, _ = ask(path, base_url, "error", stream=True)
    assert events == []
    assert_api_error(error, 502, "upstream_error")
    assert error.message == f"{MALFORMED} (an error with status 200: {SAID})."
    _, whole, _ = ask(path, base_url, "error")
    assert whole.message == error.message   # as the whole reply's


@pytest.mark.parametrize("path", PATHS)
def test_a_stream_answered_with_any_other_body_is_named_by_its_content_type(base_url, path):
    for text, content_type in (("whole", "application/json"), ("html", "text/html")):
        events, error, _ = ask(path, base_url, text, stream=True)
        assert events == []
        assert_api_error(error, 502, "upstream_error")
        assert error.message == f"{MALFORMED} (a stream was asked for, the reply is {content_type}).", text


def test_an_error_that_is_no_object_is_quoted_on_passthrough(base_url):
    _, error, _ = ask("pass", base_url, "error-text", stream=True)
    assert error.message == f"{MALFORMED} (an error with status 200: plain words)."


def test_a_completions_stream_answered_with_a_200_error_on_passthrough_carries_its_message(base_url):
    events, error, _ = _complete("pass", base_url, "error", stream=True)
    assert events == []
    assert_api_error(error, 502, "upstream_error")
    assert error.message == f"{MALFORMED} (an error with status 200: {SAID})."


def test_a_completions_stream_through_litellm_names_no_other_cause(base_url):
    events, error, _ = _complete("lite", base_url, "error", stream=True)
    assert events == []
    assert_api_error(error, 502, "upstream_error")
    assert "ended before a finish_reason" not in error.message   # QA157: the cause it named
    assert "not SSE" in error.message


def test_a_long_or_odd_body_is_named_by_its_content_type():
    from gateway.upstream_replies import MAX_ERROR_BODY_BYTES, not_sse
    long_error = json.dumps({"error": {"message": "x" * MAX_ERROR_BODY_BYTES}}).encode()
    for body in (long_error, b"[" * 30_000 + b"]" * 30_000, b"\xff\xfe{", b""):
        assert not_sse("application/json; charset=utf-8", body).message == \
            f"{MALFORMED} (a stream was asked for, the reply is application/json)."
