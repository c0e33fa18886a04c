"""What an upstream's faults tell a tenant, through litellm ("lite") and forwarded ("pass"):
never the upstream's address (URL, host:port, IP), one SSE event may be large (up to
`MAX_EVENT_BYTES`, past which it is a 502 quoting none of it), and an upstream account out
of credit (429 `insufficient_quota`) is the gateway's fault, not a retry-each-second 429."""
import json
import socket

import pytest

from gateway.litellm_errors import map_litellm_error, map_upstream_status, one_line
from gateway.passthrough import MAX_EVENT_BYTES
from tests.gateway.fake_openai import request_body
from tests.gateway.serving import free_port, start_server
from tests.gateway.test_upstream_faults import PATHS, ask, assert_api_error

QUOTA = {"message": "You exceeded your current quota, please check your plan and billing details.",
         "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}


def _chunk(delta: dict, finish_reason: str | None = None) -> bytes:
    return b"data: " + json.dumps({"id": "chatcmpl-big", "object": "chat.completion.chunk", "created": 1,
                                   "model": "fake", "choices": [{"index": 0, "delta": delta,
                                                                 "finish_reason": finish_reason}]}).encode() + b"\n\n"


async def app(scope, receive, send) -> None:
    """"quota" (OpenAI's 429 for an account out of credit), "quota-type" (only its type says
    so), "quota-midstream" (as a stream's error event), "big:N" (a stream whose one content
    delta is N KiB, sent as one SSE line)."""
    raw = await request_body(scope, receive, send)
    if raw is None:
        return
    body = json.loads(raw)
    text = body["messages"][-1]["content"]
    if text in ("quota", "quota-type"):
        error = dict(QUOTA, code=None) if text == "quota-type" else QUOTA
        await send({"type": "http.response.start", "status": 429,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": json.dumps({"error": error}).encode()})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    if text == "quota-midstream":
        parts = [_chunk({"role": "assistant", "content": "a"}), b"data: " + json.dumps({"error": QUOTA}).encode() + b"\n\n"]
    else:
        size = int(text.split(":")[1]) * 1024
        usage = {"id": "chatcmpl-big", "object": "chat.completion.chunk", "created": 1, "model": "fake",
                 "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
        parts = [_chunk({"role": "assistant", "content": "x" * size}), _chunk({}, "stop"),
                 b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n"]
    for part in parts:
        await send({"type": "http.response.body", "body": part, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


@pytest.fixture(scope="module")
def quirky_url():
    server = start_server(app)
    yield f"{server.base_url}/v1"
    server.stop()


@pytest.fixture
def never_accepting_url():
    """A listener whose backlog is full: a connect to it is never answered (Linux drops the SYN)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        try:
            filler.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(filler)
    yield f"http://127.0.0.1:{port}/private/v1"
    for sock in fillers + [listener]:
        sock.close()


def assert_no_address(message: str, port: int | str) -> None:
    for leak in ("127.0.0.1", str(port), "http://", "private", "internal-llm", ".invalid"):
        assert leak not in message, message


@pytest.mark.parametrize("path", PATHS)
def test_a_refused_connection_names_no_address(path):
    port = free_port()
    _, error, _ = ask(path, f"http://127.0.0.1:{port}/private/v1", "hi")
    assert_api_error(error, 502, "upstream_unavailable")
    assert_no_address(error.message, port)
    if path == "pass":
        assert error.message == "Upstream unreachable: ClientConnectorError"


@pytest.mark.parametrize("path", PATHS)
def test_an_unresolvable_upstream_host_is_not_named(path):
    _, error, _ = ask(path, "http://internal-llm.corp.invalid:19459/v1", "hi", timeout_s=5.0)
    assert isinstance(error, Exception) and error.status in (502, 504), repr(error)
    assert_no_address(error.message, 19459)
    if path == "pass":
        assert error.message.startswith("Upstream unreachable: ClientConnector"), error.message
        assert ":" not in error.message.removeprefix("Upstream unreachable:")


@pytest.mark.parametrize("path", PATHS)
def test_a_connect_that_times_out_names_no_url(path, never_accepting_url):
    _, error, took_s = ask(path, never_accepting_url, "hi", timeout_s=1.0)
    assert_api_error(error, 504, "upstream_timeout")
    assert_no_address(error.message, never_accepting_url.split(":")[2].split("/")[0])
    if path == "pass":
        assert error.message == "Upstream timed out: ConnectionTimeoutError"
    assert took_s < 5.0


def test_upstream_addresses_are_taken_out_of_any_error_line():
    assert one_line("Connection timeout to host http://127.0.0.1:19458/private/v1/chat/completions.") == \
        "Connection timeout to host <url>."
    assert one_line("Cannot connect to host internal-llm.corp.example:19459 ssl:default [Name or service "
                    "not known]") == "Cannot connect to host <address> ssl:default [Name or service not known]"
    assert one_line("Cannot connect to host vllm:8000 ssl:default [Connect call failed ('10.0.0.7', 8000)]") == \
        "Cannot connect to host <address> ssl:default [Connect call failed ('<address>', 8000)]"
    assert one_line("400, message='Bad', url='https://user:pw@llm.corp:8443/v1'") == "400, message='Bad', url='<url>'"
    assert one_line("to [fe80::1]:443 or localhost:8000 or 10.1.2.3:80") == "to <address> or <address> or <address>"
    error = map_litellm_error(ConnectionRefusedError("Cannot connect to host llm.corp:443 ssl:default"))
    assert "llm.corp" not in error.message and error.code == "upstream_unavailable"


@pytest.mark.parametrize("text", [
    "Invalid value: 'x'. Supported: a, b",
    "Try again at 12:30, 12:30:45 or 2024-05-01T12:30:45Z; aspect 16:9.",
    "The model 'llama3:8b' (or ft:gpt-4o-mini:org::abc123, openrouter/meta-llama/llama-3) does not exist",
    "Requested 5000 tokens, limit 4096 (version 1.2.3 or 1.2.3.4.5).",
])
def test_an_ordinary_upstream_message_is_not_mangled(text):
    assert one_line(text) == text


def test_a_huge_line_of_address_like_text_is_redacted_in_linear_time():
    import time

    for text in ("a." * 200_000, "a-" * 200_000, "x://" * 100_000, "[" + ":" * 400_000, "a:1" * 130_000):
        started = time.perf_counter()
        line = one_line(text)
        assert time.perf_counter() - started < 0.5 and len(line) <= 240


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kib", [600, 2048])
def test_one_large_sse_event_streams(quirky_url, path, kib):
    events, error, _ = ask(path, quirky_url, f"big:{kib}", stream=True)
    assert error is None, repr(error)
    assert sum(len(getattr(event, "text", "")) for event in events) == kib * 1024
    assert events[-1].finish_reason == "stop"


def test_an_sse_event_over_the_limit_is_a_502_quoting_none_of_it(quirky_url):
    events, error, _ = ask("pass", quirky_url, f"big:{MAX_EVENT_BYTES // 1024 + 64}", stream=True)
    assert events == []
    assert_api_error(error, 502, "upstream_error")
    assert "data" not in error.message and "chatcmpl" not in error.message and "xxx" not in error.message
    assert str(MAX_EVENT_BYTES) in error.message


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("text", ["quota", "quota-type"])
def test_an_upstream_out_of_quota_is_the_gateways_503_not_a_429(quirky_url, path, text):
    _, error, _ = ask(path, quirky_url, text)
    assert_api_error(error, 503, "upstream_quota_exceeded")
    assert error.type == "server_error" and "Retry-After" not in error.headers
    assert error.headers.get("x-should-retry") == "false"
    assert "operator" in error.message and "billing" not in error.message


def test_an_upstream_out_of_quota_midstream_is_the_same_error(quirky_url):
    events, error, _ = ask("pass", quirky_url, "quota-midstream", stream=True)
    assert_api_error(error, 503, "upstream_quota_exceeded")


def test_only_the_upstreams_quota_code_makes_a_429_the_gateways_fault():
    assert map_upstream_status(429, "slow down", "rate_limit_exceeded").code == "rate_limit_exceeded"
    assert map_upstream_status(429, "slow down", None, retry_after="7").headers["Retry-After"] == "7"
    assert map_upstream_status(429, "out", None, error_type="insufficient_quota").status == 503
