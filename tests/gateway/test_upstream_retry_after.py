"""An upstream's wait reaches the client as it asked, through litellm ("lite") and forwarded
directly ("pass"): `Retry-After` as seconds of any size or as an HTTP date, and OpenAI's
`retry-after-ms`, are never cut to 1 s (a negative one is none: 1 s, never 0); a batch line
waits them too (a wait past its window makes the 429 its result at once, sent once). A 200
whose body is not JSON (a proxy's HTML page) is named so, its text never quoted."""
import asyncio
import json
import time
from email.utils import formatdate

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gateway.auth import KeyRing
from gateway.batch_retry import retry_wait_s
from gateway.batch_runner import BatchRunner
from gateway.batch_store import Batch, BatchStore
from gateway.config import TenantConfig
from gateway.errors import ApiError
from gateway.file_store import FileStore
from gateway.litellm_errors import map_upstream_status
from gateway.retry_after import MAX_RETRY_AFTER_S, upstream_wait_s
from gateway.model_configs import UpstreamModelConfig
from gateway.passthrough import PassthroughBackend
from gateway.schemas import ChatCompletionRequest, CompletionRequest, validate
from gateway.upstream import UpstreamBackend
from tests.gateway.fake_openai import request_body
from tests.gateway.serving import served_url

FAR_DATE = "Fri, 31 Dec 9999 23:59:59 GMT"
PROXY_PAGE = b"<html><body>Bad gateway from internal-proxy.corp.example</body></html>"
WAITS = {  # the fake's path picks the wait headers of its 429
    "seconds": [(b"retry-after", b"999999")],
    "date": [(b"retry-after", FAR_DATE.encode())],
    "ms": [(b"retry-after-ms", b"2500")],
    "negative": [(b"retry-after", b"-5"), (b"retry-after-ms", b"-1")],
}


async def fake_upstream(scope, receive, send) -> None:
    """`/<mode>/v1/...`: a 429 with the wait headers of `mode` (WAITS), or for "html" a 200
    whose body is a proxy's HTML page."""
    if await request_body(scope, receive, send) is None:
        return
    mode = scope["path"].split("/")[1]
    if mode == "html":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": PROXY_PAGE})
        return
    await send({"type": "http.response.start", "status": 429,
                "headers": [(b"content-type", b"application/json")] + WAITS[mode]})
    await send({"type": "http.response.body", "body": json.dumps({"error": {
        "message": "Rate limit reached.", "type": "requests", "code": "rate_limit_exceeded"}}).encode()})


@pytest.fixture(scope="module")
def server_url():
    yield from served_url(fake_upstream, "")


def error_of(path: str, api_base: str, completion: bool = False) -> ApiError:
    """The error a chat (or completion) request to the upstream at `api_base` ends with."""
    async def run():
        config = UpstreamModelConfig(name=path, litellm_model="openai/fake-model", api_base=api_base,
                                     timeout_s=5.0, passthrough=path == "pass")
        backend = (PassthroughBackend if path == "pass" else UpstreamBackend)(config)
        await backend.start()
        try:
            if completion:
                prepared = await backend.prepare_completion(
                    validate(CompletionRequest, {"model": path, "prompt": "hi"}), "t", "req-1")
            else:
                prepared = await backend.prepare_chat(validate(ChatCompletionRequest, {
                    "model": path, "messages": [{"role": "user", "content": "hi"}]}), "t", "req-1")
            async for _ in backend.run(prepared):
                pass
        except ApiError as error:
            return error
        finally:
            await backend.stop()
        raise AssertionError("the upstream's error was not raised")
    return asyncio.run(run())


def test_the_wait_is_read_from_seconds_an_http_date_or_milliseconds():
    now = 2_000_000_000.0   # Wed, 18 May 2033 03:33:20 GMT
    assert upstream_wait_s("999999") == 999999 and upstream_wait_s("2.5") == 2.5
    assert upstream_wait_s(None, "2500") == 2.5 and upstream_wait_s("9", "2500") == 2.5
    assert upstream_wait_s("9", "soon") == 9   # an unreadable retry-after-ms leaves Retry-After
    for date in ("Wed, 18 May 2033 03:35:00 GMT", "Wednesday, 18-May-33 03:35:00 GMT", "Wed May 18 03:35:00 2033"):
        assert upstream_wait_s(date, now=now) == 100.0, date   # RFC 9110's three date forms
    assert upstream_wait_s("Wed, 18 May 2033 03:30:00 GMT", now=now) == 0.0   # a date past: no wait
    assert upstream_wait_s(FAR_DATE) == upstream_wait_s("9" * 5000) == MAX_RETRY_AFTER_S
    assert upstream_wait_s("soon") is None and upstream_wait_s(None) is None and upstream_wait_s("") is None


def test_the_clients_retry_after_is_the_upstreams_wait_rounded_up_never_one_second():
    assert map_upstream_status(429, "slow", retry_after="999999").headers["Retry-After"] == "999999"
    assert map_upstream_status(429, "slow", retry_after=FAR_DATE).headers["Retry-After"] == str(MAX_RETRY_AFTER_S)
    in_an_hour = formatdate(time.time() + 3600, usegmt=True)
    assert 3000 < int(map_upstream_status(503, "busy", retry_after=in_an_hour).headers["Retry-After"]) <= 3601
    assert map_upstream_status(429, "slow", retry_after_ms="2500").headers == {
        "Retry-After": "3", "retry-after-ms": "2500"}
    assert map_upstream_status(429, "slow", retry_after="nonsense").headers == {"Retry-After": "1"}


@pytest.mark.parametrize("path", ["lite", "pass"])
@pytest.mark.parametrize("mode,retry_after", [("seconds", "999999"), ("date", str(MAX_RETRY_AFTER_S))])
def test_an_upstream_429s_long_wait_reaches_the_client(server_url, path, mode, retry_after):
    error = error_of(path, f"{server_url}/{mode}/v1")
    assert (error.status, error.code) == (429, "rate_limit_exceeded")
    assert error.headers["Retry-After"] == retry_after


@pytest.mark.parametrize("path", ["lite", "pass"])
def test_an_upstreams_retry_after_ms_reaches_the_client_as_both_headers(server_url, path):
    error = error_of(path, f"{server_url}/ms/v1")
    assert error.status == 429 and error.headers == {"Retry-After": "3", "retry-after-ms": "2500"}


@pytest.mark.parametrize("retry_after,retry_after_ms", [("-5", None), (None, "-1"), ("-5", "-1"), ("-2.5", None)])
def test_a_negative_wait_is_none_never_a_retry_at_once(retry_after, retry_after_ms):
    """RFC 9110: a Retry-After is a non-negative number of seconds or a date; "-5" is as
    unreadable as "abc", so the client gets 1 s (was: 0, a retry at once) and no retry-after-ms."""
    assert upstream_wait_s(retry_after, retry_after_ms) is None
    assert map_upstream_status(429, "slow", retry_after=retry_after,
                               retry_after_ms=retry_after_ms).headers == {"Retry-After": "1"}
    assert upstream_wait_s("7", "-1") == 7   # a negative retry-after-ms leaves Retry-After
    assert retry_wait_s(429, httpx.Headers({"retry-after": "-5"}), {}) == 1.0   # a batch line waits 1 s


@pytest.mark.parametrize("path", ["lite", "pass"])
def test_an_upstreams_negative_wait_reaches_the_client_as_one_second(server_url, path):
    error = error_of(path, f"{server_url}/negative/v1")
    assert error.status == 429 and error.headers == {"Retry-After": "1"}


@pytest.mark.parametrize("path", ["lite", "pass"])
@pytest.mark.parametrize("completion", [False, True])
def test_a_200_whose_body_is_not_json_is_named_so_never_quoted(server_url, path, completion):
    error = error_of(path, f"{server_url}/html/v1", completion)
    assert (error.status, error.code) == (502, "upstream_error")
    assert "internal-proxy" not in error.message and "<html" not in error.message
    assert error.message == "Upstream error: the upstream's reply is malformed (its body is not JSON)."


@pytest.mark.parametrize("headers,wait_s", [({"retry-after-ms": "2500"}, 2.5), ({"retry-after": FAR_DATE},
                                             float(MAX_RETRY_AFTER_S)), ({"retry-after": "999999"}, 999999.0)])
def test_a_batch_line_waits_what_the_answer_asks(headers, wait_s):
    assert retry_wait_s(429, httpx.Headers(headers), {}) == wait_s


@pytest.mark.parametrize("headers", [{"retry-after-ms": "200000"}, {"retry-after": FAR_DATE}])
def test_a_batch_line_asked_to_wait_past_its_window_is_sent_once(headers):
    """The window ends at 100 s on a clock that stands still: a line asked to wait 200 s or
    years has its 429 as its result at once (was: sent again each second, without end)."""
    tries: list[str] = []

    async def chat(request: Request):
        tries.append((await request.json())["messages"][0]["content"])
        return JSONResponse({"error": {"message": "Rate limit reached.", "type": "requests", "param": None,
                                       "code": "rate_limit_exceeded"}}, status_code=429, headers=headers)

    async def main():
        keys = KeyRing((TenantConfig("a", ()),))
        files = FileStore(None)
        runner = BatchRunner(BatchStore(None), files, lambda: keys, concurrency=1, clock=lambda: 0.0)
        await runner.start(Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])]))
        line = {"custom_id": "r0", "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": "m", "messages": [{"role": "user", "content": "c0"}]}}
        upload = await files.add_bytes("a", "in.jsonl", "batch", json.dumps(line).encode())
        batch = await runner.create(Batch("batch_7", "a", "/v1/chat/completions", upload.id, "24h", 0, 100))
        deadline_s = asyncio.get_running_loop().time() + 5.0
        try:
            while (batch := runner.current(await runner.store.get("a", "batch_7"))).status != "completed":
                assert asyncio.get_running_loop().time() < deadline_s, (batch.status, len(tries))
                await asyncio.sleep(0.01)
            return batch
        finally:
            await runner.stop()
            runner.store.close()
            files.close()

    batch = asyncio.run(main())
    assert tries == ["c0"] and (batch.completed, batch.failed) == (0, 1)
