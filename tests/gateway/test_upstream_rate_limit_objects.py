"""An upstream's error object that came with no error status (an error event inside a
stream, a 200 whose body is the error object) is answered by ONE rule on both paths
(`litellm_causes.error_object_status`): a rate limit by its `code` or `type` is the upstream's
429 in the gateway's words; any other a 502, whatever its words say (QA190 F1: litellm's
guess from the words made `type: "rate_limit_error"` a 502 quoting the upstream, and a
`server_error` mentioning a rate limit a 429; F2: a 200 rate-limit object was a 502 quoting
the operator's organisation and usage)."""
import json
import logging

import pytest

from tests.gateway.fake_openai import request_body
from tests.gateway.serving import served_url
from tests.gateway.test_upstream_faults import PATHS, ask, assert_api_error
from tests.gateway.test_upstream_rate_limit_words import ORG, RATE, assert_gateways_words
from tests.gateway.test_upstream_stream_error_200 import _complete

LOGGER = "stepahead.gateway"
TYPED = {"message": f"Too many requests {ORG}", "type": "rate_limit_error", "code": None}
STRING_CODE = {"message": f"Rate limit exceeded: free-models-per-min {ORG}", "code": "429"}
WORDS = {"message": f"Backend overloaded: too many requests, rate limit of the inference pool hit ({ORG})",
         "type": "server_error", "code": "server_error"}
ERRORS = {"typed": TYPED, "string-code": STRING_CODE, "words": WORDS, "coded": RATE}


async def app(scope, receive, send) -> None:
    """The prompt "<kind>" or "<kind> json": a stream request is answered SSE with that error
    event first ("json": a 200 JSON body of it instead); a whole request, a 200 JSON body."""
    raw = await request_body(scope, receive, send)
    if raw is None:
        return
    body = json.loads(raw)
    kind, _, form = (body["messages"][-1]["content"] if "messages" in body else body["prompt"]).partition(" ")
    payload = json.dumps({"error": ERRORS[kind]}).encode()
    if body.get("stream") and form != "json":
        headers, payload = [(b"content-type", b"text/event-stream")], b"data: " + payload + b"\n\n"
    else:
        headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


@pytest.fixture(scope="module")
def base_url():
    yield from served_url(app)


def test_one_rule_reads_code_and_type_never_words():
    from gateway.litellm_causes import error_object_status

    for rate in ({"code": "rate_limit_exceeded", "type": "tokens"}, {"type": "rate_limit_error", "code": None},
                 {"code": 429}, {"code": "429"}):
        assert error_object_status(rate) == 429, rate
    for other in (WORDS, {}, {"code": ["rate_limit_exceeded"]}, {"type": ["rate_limit_error"]},
                  {"code": {"n": 429}}, {"code": "insufficient_quota"}, {"code": True}, {"code": " 429"}):
        assert error_object_status(other) == 502, other


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", ["typed", "string-code"])
def test_a_rate_limit_event_by_its_type_or_string_code_is_a_429_on_both_paths(base_url, path, kind):
    events, error, _ = ask(path, base_url, kind, stream=True)
    assert events == []
    assert_gateways_words(error)
    events, error, _ = _complete(path, base_url, kind, stream=True)
    assert events == []
    assert_gateways_words(error)


@pytest.mark.parametrize("path", PATHS)
def test_a_server_error_event_whose_words_name_a_rate_limit_is_a_502_on_both_paths(base_url, path):
    for events, error, _ in (ask(path, base_url, "words", stream=True), _complete(path, base_url, "words", True)):
        assert events == []
        assert_api_error(error, 502, "upstream_error")
        assert error.message == f"Upstream error: {WORDS['message']}"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kind", ["coded", "string-code"])
def test_a_200_whose_body_is_a_rate_limit_is_the_upstreams_429_in_the_gateways_words(base_url, path, kind, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        events, error, _ = ask(path, base_url, kind)
    assert events == []
    assert_gateways_words(error)
    (line,) = [r.getMessage() for r in caplog.records if "upstream rate limit" in r.getMessage()]
    assert f"model {path}: the upstream answered 429: " in line and ORG in line   # the operator's words


def test_a_200_rate_limit_by_its_type_alone_on_passthrough_and_any_completions_path(base_url):
    # (litellm's chat keeps only a 200 error object's code and message: its type is lost there)
    assert_gateways_words(ask("pass", base_url, "typed")[1])
    for path in PATHS:
        assert_gateways_words(_complete(path, base_url, "typed", stream=False)[1])


@pytest.mark.parametrize("path", PATHS)
def test_a_stream_answered_200_with_a_json_rate_limit_is_a_429(base_url, path):
    events, error, _ = ask(path, base_url, "coded json", stream=True)
    assert events == []
    assert_gateways_words(error)


@pytest.mark.parametrize("path", PATHS)
def test_any_other_200_error_object_is_still_a_502_naming_its_message(base_url, path):
    events, error, _ = ask(path, base_url, "words")
    assert events == []
    assert_api_error(error, 502, "upstream_error")
    assert error.message == ("Upstream error: the upstream's reply is malformed (an error with status 200: "
                             f"{WORDS['message']}).")
