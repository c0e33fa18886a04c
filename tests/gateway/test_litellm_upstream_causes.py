"""litellm's guesses are not the upstream's words: an upstream 400/413 keeps its status
whatever its message says (litellm makes "Request too large" a 429 and "The server had an
error processing your request" a 500), a stream cut after it began is an `upstream_error`
(litellm calls it `APIConnectionError` too) while a refused connection stays
`upstream_unavailable`, litellm's wrapper words never reach a message, and a fault only the
operator can cure says `x-should-retry: false`. Through litellm ("lite") and forwarded ("pass")."""
import asyncio
import json
import os

import httpx
import openai
import pytest
from litellm.exceptions import (APIConnectionError, InternalServerError, MidStreamFallbackError, RateLimitError,
                                ServiceUnavailableError, Timeout)
from litellm.litellm_core_utils.exception_mapping_utils import exception_type
from litellm.llms.openai.common_utils import OpenAIError

from gateway.embeddings import EmbeddingsRequest
from gateway.errors import ApiError
from gateway.litellm_errors import map_litellm_error, map_upstream_status
from gateway.schemas import CompletionRequest, validate
from tests.gateway.fake_openai import _chunk, request_body, send_json
from tests.gateway.serving import served_url
from tests.gateway.test_upstream_faults import PATHS, ask, assert_api_error, backend

TOO_LARGE_413 = {"message": "Request too large.", "type": "invalid_request_error", "param": None,
                 "code": "request_too_large"}
TOO_LARGE_400 = {"message": "Request too large: your input exceeds 1 MB.", "type": "invalid_request_error",
                 "param": "input", "code": "invalid_value"}
SERVER_WORDS_400 = {"message": "Bad tool schema. The server had an error processing your request.",
                    "type": "invalid_request_error", "param": "tools", "code": "invalid_value"}
OVERLOADED = {"message": "The engine is currently overloaded.", "type": "server_error", "param": None, "code": None}
CONTEXT = {"message": "maximum context length exceeded", "type": "invalid_request_error", "param": "messages",
           "code": "context_length_exceeded"}
ERRORS = {"too-large-413": (413, TOO_LARGE_413), "too-large-400": (400, TOO_LARGE_400),
          "server-words-400": (400, SERVER_WORDS_400), "overloaded": (503, OVERLOADED),
          "status:401": (401, {"message": "Incorrect API key provided.", "type": "invalid_request_error"}),
          "status:404": (404, {"message": "The model `fake-model` does not exist.", "code": "model_not_found"})}


async def _misworded_upstream(scope, receive, send) -> None:
    """An error of `ERRORS` by the request's text (chat, completions, embeddings); "cut": a
    stream whose connection breaks after two chunks (the app fails, the server aborts it);
    "context-event": a stream whose first event is an error; "list-chunk": a stream whose second
    chunk is a JSON list."""
    raw = await request_body(scope, receive, send)
    if raw is None:
        return
    body = json.loads(raw)
    text = body["messages"][-1]["content"] if "messages" in body else body.get("prompt") or body.get("input")
    if text in ERRORS:
        status, error = ERRORS[text]
        await send_json(send, status, {"error": error})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    if text == "context-event":
        await send({"type": "http.response.body", "body": b"data: " + json.dumps({"error": CONTEXT}).encode()
                    + b"\n\ndata: [DONE]\n\n", "more_body": False})
        return
    if text == "list-chunk":
        await send({"type": "http.response.body", "body": _chunk({"content": "a "}) + b"data: [1, 2]\n\n"
                    + b"data: [DONE]\n\n", "more_body": False})
        return
    for word in ("a ", "b "):
        await send({"type": "http.response.body", "body": _chunk({"content": word}), "more_body": True})
    raise ConnectionAbortedError("the upstream went away mid-stream")   # the server drops the connection


@pytest.fixture(scope="module")
def misworded_url():
    os.environ.setdefault("STEPAHEAD_TEST_FAULTS_KEY", "sk-upstream-secret")
    yield from served_url(_misworded_upstream)


def _as_litellm_maps(status: int, error: dict) -> Exception:
    """The exception litellm raises for an OpenAI upstream's `status` reply of `error`, built as
    its OpenAI handler builds it (the SDK's error, in its `OpenAIError`, mapped by litellm's own
    `exception_type` while handling it, so the chain is litellm's)."""
    request = httpx.Request("POST", "http://upstream.test/v1/chat/completions")
    reply = httpx.Response(status, json={"error": error}, request=request)
    try:
        try:
            raise openai.APIStatusError(f"Error code: {status} - {error['message']}", response=reply, body=error)
        except openai.APIStatusError as sdk_error:
            raise OpenAIError(status, str(sdk_error), request=request, response=reply, headers=reply.headers,
                              body=error) from sdk_error
    except OpenAIError as provider_error:
        try:
            exception_type(model="fake-model", original_exception=provider_error, custom_llm_provider="openai")
        except Exception as mapped:   # litellm raises its mapped exception
            return mapped
    raise AssertionError("litellm mapped nothing")


def test_litellms_status_guessed_from_the_words_gives_way_to_the_upstreams():
    for status, error, litellm_says in ((413, TOO_LARGE_413, RateLimitError), (400, TOO_LARGE_400, RateLimitError),
                                        (400, SERVER_WORDS_400, InternalServerError)):
        exc = _as_litellm_maps(status, error)
        assert isinstance(exc, litellm_says)   # litellm's guess by the words, the reason for upstream_status
        mapped = map_litellm_error(exc, prompt_param="input")
        assert (mapped.status, mapped.type, mapped.code, mapped.param, mapped.message) == (
            status, "invalid_request_error", error["code"], error["param"], error["message"])
        assert "Retry-After" not in mapped.headers
    real_429 = map_litellm_error(_as_litellm_maps(429, {"message": "Request too large for gpt-4o on tokens per "
                                                        "min (TPM).", "code": "rate_limit_exceeded"}))
    assert (real_429.status, real_429.code) == (429, "rate_limit_exceeded")   # OpenAI's own 429 stays one


def _broken_off_stream() -> MidStreamFallbackError:
    """What litellm's stream wrapper raises for a connection cut after chunks came: the SDK's
    "Connection error." over httpx's read error, wrapped in `MidStreamFallbackError`."""
    request = httpx.Request("POST", "http://upstream.test/v1/chat/completions")
    try:
        try:
            try:
                raise httpx.ReadError("Response payload is not completed", request=request)
            except httpx.ReadError as read_error:
                raise openai.APIConnectionError(request=request) from read_error
        except openai.APIConnectionError as raw:
            mapped = APIConnectionError("APIConnectionError: OpenAIException - Connection error.", "openai",
                                        "fake-model")
            raise MidStreamFallbackError(message=str(mapped), model="fake-model", llm_provider="openai",
                                         original_exception=mapped, generated_content="a b ") from raw
    except MidStreamFallbackError as exc:
        return exc


def _refused() -> InternalServerError:
    """What litellm raises for a connection refused: the SDK's "Connection error." over
    httpx's ConnectError, as an `InternalServerError`."""
    request = httpx.Request("POST", "http://upstream.test/v1/chat/completions")
    try:
        try:
            try:
                raise httpx.ConnectError("[Errno 111] Connect call failed", request=request)
            except httpx.ConnectError as connect_error:
                raise openai.APIConnectionError(request=request) from connect_error
        except openai.APIConnectionError:
            raise InternalServerError("InternalServerError: OpenAIException - Connection error.", "openai",
                                      "fake-model")
    except InternalServerError as exc:
        return exc


def test_a_stream_that_broke_off_is_an_upstream_error_and_a_refused_connection_is_unreachable():
    cut = _broken_off_stream()
    assert str(cut).startswith("litellm.MidStreamFallbackError: litellm.APIConnectionError: APIConnectionError: "
                               "OpenAIException - Connection error.")   # litellm's words, as it raises them
    error = map_litellm_error(cut)
    assert (error.status, error.code) == (502, "upstream_error")
    assert error.message == "Upstream error: ReadError: Response payload is not completed"
    refused = map_litellm_error(_refused())
    assert (refused.status, refused.code, refused.message) == (502, "upstream_unavailable",
                                                               "Upstream unreachable: Connection error.")
    bare = APIConnectionError("APIConnectionError: OpenAIException - Connection error.", "openai", "m")
    assert map_litellm_error(bare).code == "upstream_unavailable"   # nothing says more: as litellm says
    try:   # litellm's catch-all APIConnectionError over a chunk it could not read: no connection fault
        raise bare from AttributeError("'list' object has no attribute 'choices'")
    except APIConnectionError as wrapped:
        unread = map_litellm_error(wrapped)
        assert (unread.code, unread.message) == ("upstream_error", "Upstream error: the upstream's reply is "
                                                 "malformed (a part of it is not the shape the OpenAI protocol "
                                                 "gives it).")   # not Python's words (QA98)


def test_litellms_wrapper_words_are_taken_off_known_messages():
    from gateway.litellm_causes import wrapper_free

    overloaded = ServiceUnavailableError("ServiceUnavailableError: OpenAIException - Error code: 503 - The engine "
                                         "is currently overloaded.", "openai", "fake-model")   # no body: /v1/completions
    assert map_litellm_error(overloaded).message == "Upstream unavailable: The engine is currently overloaded."
    slow = Timeout("APITimeoutError - Request timed out. Error_str: Request timed out. - timeout value=3.0, time "
                   "taken=3.01 seconds", "fake-model", "openai")
    assert map_litellm_error(slow).message == "Upstream timed out: Request timed out."   # as a stream's (QA229 F1)
    known = {  # litellm's texts, as its exceptions carry them, and what the upstream itself said
        "litellm.MidStreamFallbackError: litellm.APIConnectionError: APIConnectionError: OpenAIException - "
        "maximum context length exceeded": "maximum context length exceeded",
        "litellm.ServiceUnavailableError: ServiceUnavailableError: OpenAIException - Error code: 503 - The "
        "engine is currently overloaded.": "The engine is currently overloaded.",
        "litellm.InternalServerError: InternalServerError: OpenAIException - litellm.MidStreamFallbackError: "
        "litellm.APIConnectionError: APIConnectionError: Text-completion-openaiException - Connection error. "
        "Original exception: APIConnectionError: litellm.APIConnectionError: x": "Connection error.",
        "litellm.Timeout: APITimeoutError - Request timed out. Error_str: Request timed out. - timeout "
        "value=3.0, time taken=3.01 seconds": "Request timed out.",
        "RuntimeError: boom": "RuntimeError: boom",   # no litellm marker: an exception's own words stay
        "ValueError: the OpenAIException-style words of an upstream": "ValueError: the OpenAIException-style "
        "words of an upstream",
    }
    for text, own in known.items():
        assert wrapper_free(text) == own, text


def test_a_fault_only_the_operator_can_cure_says_not_to_retry():
    for status, code in ((401, "invalid_api_key"), (403, None), (404, None), (400, "model_not_found")):
        error = map_upstream_status(status, "no", code)
        assert error.status == 502 and error.headers == {"x-should-retry": "false"}, (status, error)
    assert map_upstream_status(502, "bad gateway").headers == {}   # a passing fault may be retried


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("text", ["too-large-413", "too-large-400", "server-words-400"])
def test_an_upstream_400_or_413_keeps_its_status_whatever_its_words(misworded_url, path, text):
    status, body = ERRORS[text]
    _, error, _ = ask(path, misworded_url, text)
    assert_api_error(error, status, body["code"])
    assert (error.param, error.message, error.headers) == (body["param"], body["message"], {})


def test_an_embeddings_413_through_litellm_keeps_its_status(misworded_url):
    async def embed():
        up = backend("lite", misworded_url)
        await up.start()
        try:
            return await up.embed(validate(EmbeddingsRequest, {"model": "lite", "input": "too-large-413"}))
        finally:
            await up.stop()
    with pytest.raises(ApiError) as caught:
        asyncio.run(embed())
    assert_api_error(caught.value, 413, "request_too_large")
    assert caught.value.message == "Request too large." and "Retry-After" not in caught.value.headers


@pytest.mark.parametrize("path", PATHS)
def test_a_stream_cut_midway_is_an_upstream_error_not_unreachable(misworded_url, path):
    events, error, _ = ask(path, misworded_url, "cut", stream=True)
    assert len(events) == 2   # the chunks that came
    assert_api_error(error, 502, "upstream_error")
    assert "unreachable" not in error.message.lower() and "OpenAIException" not in error.message


@pytest.mark.parametrize("path", PATHS)
def test_a_stream_chunk_that_is_no_object_is_a_malformed_reply_in_words_of_our_own(misworded_url, path):
    """QA98: through litellm the message was Python's ("'list' object has no attribute 'choices'")."""
    events, error, _ = ask(path, misworded_url, "list-chunk", stream=True)
    assert len(events) <= 1   # the chunk before it, where litellm passed it on
    assert_api_error(error, 502, "upstream_error")
    assert "malformed" in error.message and "attribute" not in error.message, error.message


@pytest.mark.parametrize("path", PATHS)
def test_a_streams_error_event_keeps_the_upstreams_own_words(misworded_url, path):
    _, error, _ = ask(path, misworded_url, "context-event", stream=True)
    assert_api_error(error, 400, "context_length_exceeded")
    assert (error.message, error.param) == ("maximum context length exceeded", "messages")


@pytest.mark.parametrize("path", PATHS)
def test_an_upstream_503_on_completions_is_in_its_own_words(misworded_url, path):
    async def complete():
        up = backend(path, misworded_url)
        await up.start()
        try:
            prepared = await up.prepare_completion(validate(CompletionRequest, {"model": path, "prompt": "overloaded"}),
                                                   "t", "r")
            async for _ in up.run(prepared):
                pass
        finally:
            await up.stop()
    with pytest.raises(ApiError) as caught:
        asyncio.run(complete())
    assert_api_error(caught.value, 503, "upstream_unavailable")
    assert caught.value.message == "Upstream unavailable: The engine is currently overloaded."


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("text", ["status:401", "status:404"])
def test_an_upstream_misconfiguration_tells_the_client_not_to_retry(misworded_url, path, text):
    _, error, _ = ask(path, misworded_url, text)
    assert error.status == 502 and error.code in ("upstream_auth_error", "upstream_error"), repr(error)
    assert error.headers.get("x-should-retry") == "false"
