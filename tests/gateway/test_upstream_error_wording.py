"""One wording per upstream fault on both paths, through litellm ("lite") and forwarded
("pass"), chat and legacy completions alike (QA226 F6): a reply that is not JSON is named
so, never in the JSON parser's words ("Expecting value: line 1 column 50 (char 49)"), and
a timeout carries none of litellm's decoration ("APITimeoutError - … Error_str: …").
Status and code stay what they were (502 `upstream_error`, 504 `upstream_timeout`)."""
import asyncio
import json
import os

import pytest

from gateway.errors import ApiError
from gateway.litellm_causes import wrapper_free
from gateway.model_configs import UpstreamModelConfig
from gateway.passthrough import PassthroughBackend
from gateway.schemas import ChatCompletionRequest, CompletionRequest, validate
from gateway.upstream import UpstreamBackend
from tests.gateway.fake_openai import request_body
from tests.gateway.serving import start_server

KEY_ENV = "STEPAHEAD_TEST_WORDING_KEY"
PATHS = ("lite", "pass")
CUT_BODY = b'{"id": "x", "object": "chat.completion", "choices": ['   # a 200 cut mid-JSON
NOT_JSON_BODY = "Upstream error: the upstream's reply is malformed (its body is not JSON)."
NOT_JSON_EVENT = "Upstream error: the upstream's reply is malformed (an event of the stream is not JSON)."


async def fake_upstream(scope, receive, send) -> None:
    """The prompt (or last message) picks the fault: "cutjson" (a 200 JSON body cut short),
    "badchunk" (a stream whose second event is not JSON), "hangstream" (a stream that stops
    after its first chunk and holds the connection)."""
    raw = await request_body(scope, receive, send)
    if raw is None:
        return
    body = json.loads(raw)
    is_chat = scope["path"].endswith("/chat/completions")
    fault = body["messages"][-1]["content"] if is_chat else body["prompt"]
    if fault == "cutjson":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": CUT_BODY})
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})
    choice = ({"index": 0, "delta": {"content": "hi"}, "finish_reason": None} if is_chat
              else {"index": 0, "text": "hi", "finish_reason": None})
    first = {"id": "x", "object": "chat.completion.chunk" if is_chat else "text_completion",
             "created": 1, "model": "up", "choices": [choice]}
    await send({"type": "http.response.body", "body": b"data: " + json.dumps(first).encode() + b"\n\n",
                "more_body": True})
    if fault == "badchunk":
        await send({"type": "http.response.body", "body": b"data: {not json\n\n", "more_body": False})
        return
    await asyncio.sleep(30)   # "hangstream": cut by the server's stop


@pytest.fixture(scope="module")
def base_url():
    os.environ.setdefault(KEY_ENV, "sk-upstream-secret")
    server = start_server(fake_upstream, shutdown_timeout_s=0.1)
    try:
        yield f"{server.base_url}/v1"
    finally:
        server.stop()


def failure(path: str, base_url: str, fault: str, *, is_chat: bool, stream: bool) -> ApiError:
    """The error that ended a request for `fault` on `path` (timeout_s 0.5)."""
    async def run():
        config = UpstreamModelConfig(name=path, litellm_model="openai/up", api_base=base_url, api_key_env=KEY_ENV,
                                     timeout_s=0.5, passthrough=path == "pass")
        backend = (PassthroughBackend if path == "pass" else UpstreamBackend)(config)
        await backend.start()
        try:
            if is_chat:
                request = validate(ChatCompletionRequest, {
                    "model": path, "messages": [{"role": "user", "content": fault}], "stream": stream})
                prepared = await backend.prepare_chat(request, "t", "req-1")
            else:
                request = validate(CompletionRequest, {"model": path, "prompt": fault, "stream": stream})
                prepared = await backend.prepare_completion(request, "t", "req-1")
            async for _ in backend.run(prepared):
                pass
        except ApiError as error:
            return error
        finally:
            await backend.stop()
        raise AssertionError(f"{fault} on {path} did not fail")
    return asyncio.run(run())


@pytest.mark.parametrize("is_chat", [True, False], ids=["chat", "completions"])
@pytest.mark.parametrize("fault, stream, message", [
    ("cutjson", False, NOT_JSON_BODY),
    ("badchunk", True, NOT_JSON_EVENT),
])
def test_a_reply_that_is_not_json_is_worded_alike_on_both_paths(base_url, is_chat, fault, stream, message):
    errors = {path: failure(path, base_url, fault, is_chat=is_chat, stream=stream) for path in PATHS}
    for path, error in errors.items():
        assert (error.status, error.code, error.message) == (502, "upstream_error", message), path


@pytest.mark.parametrize("is_chat", [True, False], ids=["chat", "completions"])
def test_a_stream_that_hangs_through_litellm_times_out_without_litellms_words(base_url, is_chat):
    error = failure("lite", base_url, "hangstream", is_chat=is_chat, stream=True)
    assert (error.status, error.code, error.message) == (504, "upstream_timeout", "Upstream timed out: Request timed out.")


@pytest.mark.parametrize("text", [
    "litellm.Timeout: APITimeoutError - Request timed out. Error_str: Request timed out.",
    # a text completion's: litellm's whole timeout text wrapped in another
    "litellm.Timeout: APITimeoutError - Request timed out. Error_str: litellm.Timeout: APITimeoutError - "
    "Request timed out. Error_str: Request timed out.",
])
def test_litellms_timeout_words_come_off_nested_or_not(text):
    assert wrapper_free(text) == "Request timed out."


def test_not_json_reads_the_parser_error_in_a_chain():
    from gateway.litellm_causes import not_json

    try:
        try:
            json.loads("{not json")
        except ValueError as exc:
            raise RuntimeError("wrapped") from exc
    except RuntimeError as wrapped:
        assert not_json(wrapped)
    assert not not_json(RuntimeError("Expecting value"))
