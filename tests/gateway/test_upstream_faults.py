"""A misbehaving upstream, through litellm ("lite") and forwarded directly ("pass"):
every fault is an OpenAI-shaped `ApiError` with a short message, never another exception,
an empty success or a truncated one; `timeout_s` bounds each wait, never a healthy stream."""
import asyncio
import os
import time

import pytest

from gateway.backend import Finished, TextDelta, ToolCallDelta
from gateway.embeddings import EmbeddingsRequest
from gateway.errors import ApiError
from gateway.litellm_errors import map_litellm_error, one_line
from gateway.model_configs import UpstreamModelConfig
from gateway.passthrough import PassthroughBackend
from gateway.schemas import ChatCompletionRequest, validate
from gateway.upstream import UpstreamBackend
from tests.gateway import fake_openai
from tests.gateway.serving import free_port, start_server

KEY_ENV = "STEPAHEAD_TEST_FAULTS_KEY"
PATHS = ("lite", "pass")


@pytest.fixture(scope="module")
def base_url():
    """The fake upstream; its stop cuts the "hang" answers the timeouts left sleeping at once
    (a whole graceful shutdown would wait for them)."""
    os.environ.setdefault(KEY_ENV, "sk-upstream-secret")
    server = start_server(fake_openai.app, shutdown_timeout_s=0.1)
    try:
        yield f"{server.base_url}/v1"
    finally:
        server.stop()


def backend(path: str, api_base: str, timeout_s: float = 3.0) -> UpstreamBackend:
    config = UpstreamModelConfig(name=path, litellm_model="openai/fake-model", api_base=api_base,
                                 api_key_env=KEY_ENV, timeout_s=timeout_s, passthrough=path == "pass")
    return (PassthroughBackend if path == "pass" else UpstreamBackend)(config)


def drive(path: str, api_base: str, timeout_s: float, prepare):
    """Run the request `prepare(backend)` makes on a started backend of `path`: (the events
    it yielded, the exception that ended them or None, seconds)."""
    async def run():
        up = backend(path, api_base, timeout_s)
        await up.start()
        events, error = [], None
        started = time.perf_counter()
        try:
            async for event in up.run(await prepare(up)):
                events.append(event)
        except Exception as exc:   # the test looks at what escaped
            error = exc
        finally:
            await up.stop()
        return events, error, time.perf_counter() - started
    return asyncio.run(run())


def ask(path: str, api_base: str, text: str, stream: bool = False, timeout_s: float = 3.0):
    """(the events the backend yielded, the exception that ended them or None, seconds)."""
    request = validate(ChatCompletionRequest, {
        "model": path, "messages": [{"role": "user", "content": text}], "stream": stream})
    return drive(path, api_base, timeout_s, lambda up: up.prepare_chat(request, "t", "req-1"))


def assert_api_error(error, status: int, code: str) -> None:
    assert isinstance(error, ApiError), repr(error)
    assert (error.status, error.code) == (status, code), (error.status, error.code, error.message)
    assert "\n" not in error.message and "Traceback" not in error.message
    assert "/site-packages/" not in error.message and "/srv/" not in error.message
    assert len(error.message) <= 260


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("text", ["emptychoices", "error200", "listbody", "contentnum", "contentobj",
                                  "argsobj", "finishnum", "usagefloat", "usagetext"])
def test_garbage_in_a_whole_reply_is_a_502(base_url, path, text):
    if path == "lite" and text == "listbody":
        pytest.skip("litellm reads it itself")
    events, error, _ = ask(path, base_url, text)
    if path == "lite" and text in ("argsobj", "finishnum"):   # litellm makes them strings
        assert error is None and all(isinstance(getattr(e, "arguments", e.finish_reason if isinstance(
            e, Finished) else ""), str) for e in events)
        return
    assert events == []   # nothing of it reaches the client, its trace or its spent tokens
    assert_api_error(error, 502, "upstream_error")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("text", ["nostream", "error200", "html", "emptychoices"])
def test_a_stream_answered_without_sse_is_a_502_before_any_event(base_url, path, text):
    events, error, _ = ask(path, base_url, text, stream=True)
    assert events == []
    assert_api_error(error, 502, "upstream_error")


@pytest.mark.parametrize("path", PATHS)
def test_a_stream_cut_before_its_finish_reason_is_an_error_not_a_whole_reply(base_url, path):
    events, error, _ = ask(path, base_url, "nodone", stream=True)
    assert not any(isinstance(event, Finished) for event in events)
    assert isinstance(error, ApiError) and error.status == 502, repr(error)


@pytest.mark.parametrize("path", PATHS)
def test_a_good_reply_still_passes_whole_and_streamed(base_url, path):
    events, error, _ = ask(path, base_url, "tool")
    assert error is None and events[0] == ToolCallDelta(0, "call_fake1", "lookup", '{"q": "x"}')
    assert events[-1].finish_reason == "tool_calls"
    events, error, _ = ask(path, base_url, "a b", stream=True)
    assert error is None and "".join(e.text for e in events if isinstance(e, TextDelta)) == "echo: a b "
    assert events[-1].finish_reason == "stop" and events[-1].usage.num_completion_tokens == 3


@pytest.mark.parametrize("path", PATHS)
def test_timeout_s_bounds_a_hang_without_hidden_retries(base_url, path):
    _, error, took_s = ask(path, base_url, "hang", timeout_s=1.0)
    assert_api_error(error, 504, "upstream_timeout")
    assert took_s < 2.5


@pytest.mark.parametrize("path", PATHS)
def test_an_upstream_429_comes_back_at_once_with_its_retry_after(base_url, path):
    _, error, took_s = ask(path, base_url, "status:429")
    assert_api_error(error, 429, "rate_limit_exceeded")
    assert error.headers["Retry-After"] == "30" and took_s < 2.0


@pytest.mark.parametrize("path", PATHS)
def test_timeout_s_does_not_cut_a_long_healthy_stream(base_url, path):
    # 4 chunks 0.4 s apart: 1.6 s in all, past a 1 s timeout_s, each wait well inside it
    events, error, took_s = ask(path, base_url, "trickle", stream=True, timeout_s=1.0)
    assert error is None, repr(error)
    assert took_s > 1.0 and events[-1].finish_reason == "stop"


@pytest.mark.parametrize("path", PATHS)
def test_a_refused_connection_is_upstream_unavailable(path):
    _, error, took_s = ask(path, f"http://127.0.0.1:{free_port()}/v1", "hi")
    assert_api_error(error, 502, "upstream_unavailable")
    assert took_s < 2.0


def test_a_non_json_error_body_is_not_copied_to_the_client(base_url):
    for path in PATHS:
        _, error, _ = ask(path, base_url, "html")
        assert_api_error(error, 502, "upstream_error")
        assert "html" not in error.message.lower()


def test_embeddings_of_the_wrong_shape_are_a_502(base_url):
    async def embed():
        up = backend("lite", base_url)
        await up.start()
        return await up.embed(validate(EmbeddingsRequest, {"model": "lite", "input": "wrongshape"}))
    with pytest.raises(ApiError) as caught:
        asyncio.run(embed())
    assert_api_error(caught.value, 502, "upstream_error")


def test_a_message_is_one_line_without_traceback_or_paths():
    text = ('litellm.APIError: Invalid response object Traceback (most recent call last):\n'
            '  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/litellm/x.py", line 870')
    assert one_line(text) == "Invalid response object"
    assert one_line("failed at /srv/secret/app.py line 3") == "failed at <path> line 3"
    assert len(one_line("x" * 1000)) == 240
    error = map_litellm_error(RuntimeError("boom\n  File \"/opt/app/main.py\", line 1"))
    assert (error.status, error.code, error.message) == (502, "upstream_error", "Upstream error: RuntimeError: boom")
    assert map_litellm_error(TimeoutError()).code == "upstream_timeout"   # asyncio's, as aiohttp raises


def test_a_model_name_with_slashes_is_no_path_in_a_message():
    from gateway.litellm_errors import one_line

    assert one_line("The model openrouter/meta-llama/llama-3 does not exist") == \
        "The model openrouter/meta-llama/llama-3 does not exist"
    assert one_line('at "/srv/app/site-packages/x.py", line 3') == 'at "<path>", line 3'
