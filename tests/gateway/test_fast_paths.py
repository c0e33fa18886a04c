"""The completion fast path, and errors on every path contained before they reach the server."""
import asyncio
import json
import traceback

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route, Router

from gateway.fast_paths import CompletionFastPath
from gateway.routes import error_response


async def broken(_request: Request):
    raise RuntimeError("a bug")


async def fine(_request: Request):
    return JSONResponse({"ok": True})


async def with_own_id(_request: Request):
    return JSONResponse({"ok": True}, headers={"x-request-id": "resp_own"})


async def broken_mid_stream(_request: Request):
    async def body():
        yield b"first"
        raise RuntimeError("a bug after the response started")
    return StreamingResponse(body())


def app_with_fast_path() -> CompletionFastPath:
    inner = Router(routes=[   # what the app's own error layer wraps
        Route("/v1/responses", broken, methods=["POST"]), Route("/v1/models", fine, methods=["GET"]),
        Route("/v1/stream", broken_mid_stream, methods=["GET"]),
        Route("/v1/responses/resp_own", with_own_id, methods=["GET"]), Route("/health", fine, methods=["GET"])])
    return CompletionFastPath(inner, handlers={"/v1/chat/completions": broken}, error_response=error_response)


async def call(app, method: str, path: str, headers: list | None = None) -> list[dict]:
    scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "query_string": b"",
             "headers": headers or [], "root_path": "", "scheme": "http", "server": ("127.0.0.1", 80), "http_version": "1.1"}
    sent: list[dict] = []

    received = asyncio.Event()

    async def receive():
        if received.is_set():
            await asyncio.Event().wait()   # the client stays
        received.set()
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    return sent


@pytest.mark.parametrize("method, path", [("POST", "/v1/responses"), ("POST", "/v1/chat/completions")])
async def test_an_unexpected_error_before_the_response_is_an_openai_shaped_500_that_goes_no_further(
        method, path, caplog):
    with caplog.at_level("ERROR", logger="stepahead.gateway"):
        sent = await call(app_with_fast_path(), method, path)   # raising here would close the connection
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 500
    error = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))["error"]
    assert error["type"] == "server_error" and set(error) == {"message", "type", "param", "code"}
    assert any("unhandled error" in message for message in caplog.messages)


async def test_other_paths_are_served_as_they_are():
    sent = await call(app_with_fast_path(), "GET", "/v1/models")
    assert sent[0]["status"] == 200 and json.loads(sent[1]["body"]) == {"ok": True}


async def test_an_error_after_the_response_started_still_reaches_the_server():
    """Nothing more can be answered on that response: the server must cut it."""
    with pytest.raises(BaseException) as caught:   # a StreamingResponse raises it in a group
        await call(app_with_fast_path(), "GET", "/v1/stream")
    assert "a bug after the response started" in "".join(traceback.format_exception(caught.value))


async def test_every_v1_answer_carries_a_request_id_its_handlers_own_kept():
    def request_ids(sent) -> list[bytes]:
        return [value for name, value in sent[0]["headers"] if name == b"x-request-id"]

    [made] = request_ids(await call(app_with_fast_path(), "GET", "/v1/models"))
    assert made.startswith(b"req") and len(made) > 10
    assert request_ids(await call(app_with_fast_path(), "GET", "/v1/models")) != [made]   # one per answer
    assert request_ids(await call(app_with_fast_path(), "GET", "/v1/responses/resp_own")) == [b"resp_own"]
    assert request_ids(await call(app_with_fast_path(), "GET", "/health")) == []   # not an API answer


@pytest.mark.parametrize("method, path", [("GET", "/v1/models"), ("POST", "/v1/chat/completions"),
                                          ("POST", "/v1/responses")])
async def test_the_fast_paths_own_answers_on_v1_carry_a_request_id(method, path):
    """QA228 F3: the 401 for two Authorization headers (and the 500 of an error before a
    response) are made here, past the layer that adds it."""
    two = [(b"authorization", b"Bearer a"), (b"authorization", b"Bearer b")]
    sent = await call(app_with_fast_path(), method, path, headers=two)
    assert sent[0]["status"] == 401
    assert [value for name, value in sent[0]["headers"] if name == b"x-request-id"][0].startswith(b"req")
    if method == "POST":   # both paths raise before their response: a 500, with its own id
        sent = await call(app_with_fast_path(), method, path)
        assert sent[0]["status"] == 500
        assert [value for name, value in sent[0]["headers"] if name == b"x-request-id"][0].startswith(b"req")
    health = await call(app_with_fast_path(), "GET", "/health", headers=two)
    assert health[0]["status"] == 401 and b"x-request-id" not in dict(health[0]["headers"])   # not an API answer
