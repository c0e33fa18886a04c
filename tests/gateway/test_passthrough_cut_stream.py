"""A passthrough stream the upstream cuts mid-way: every chunk it sent before the cut reaches
the client (and so its usage, charge and trace), then the 502 `upstream_error`, however
slowly the gateway's side reads it (QA226 F2: aiohttp raises the stored cut before handing
out the lines it holds, so a reader slower than the upstream lost the stream's tail).

The fake upstream sends its chunks, says so, and cuts the connection (an ASGI app that
raises after its response began: uvicorn drops the connection without the body's end); the
reader takes the first event, waits until all of it was sent and cut, then reads on."""
import asyncio
import json
import threading

import pytest

from gateway.backend import TextDelta
from gateway.errors import ApiError
from gateway.model_configs import UpstreamModelConfig
from gateway.passthrough import PassthroughBackend
from gateway.schemas import ChatCompletionRequest, validate
from tests.gateway.fake_openai import request_body
from tests.gateway.serving import start_server

NUM_CHUNKS = 6
SETTLE_S = 0.3   # after the cut was sent: the gateway's loop has taken in the data and the cut


def _chunk(delta: dict) -> bytes:
    return b"data: " + json.dumps({"id": "chatcmpl-cut", "object": "chat.completion.chunk", "created": 1,
                                   "model": "fake", "choices": [{"index": 0, "delta": delta,
                                                                 "finish_reason": None}]}).encode() + b"\n\n"


class CuttingUpstream:
    """The last message picks the stream: "cut" sends NUM_CHUNKS content chunks ("c0 ", ...)
    one body message each, "cut-in-line" the same and then half of one more line; then
    `sent` is set and the connection cut."""

    def __init__(self) -> None:
        self.sent = threading.Event()

    async def __call__(self, scope, receive, send) -> None:
        raw = await request_body(scope, receive, send)
        if raw is None:
            return
        text = json.loads(raw)["messages"][-1]["content"]
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        parts = [_chunk({"role": "assistant", "content": "c0 "})]
        parts += [_chunk({"content": f"c{index} "}) for index in range(1, NUM_CHUNKS)]
        if text == "cut-in-line":
            parts.append(_chunk({"content": "never whole"})[:40])
        for part in parts:
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await asyncio.sleep(0.05)   # the chunks leave before the cut
        self.sent.set()
        raise RuntimeError("the upstream cuts the connection (expected in this test)")


@pytest.fixture(scope="module")
def upstream():
    fake = CuttingUpstream()
    server = start_server(fake, shutdown_timeout_s=0.1)
    yield fake, f"{server.base_url}/v1"
    server.stop()


def read_slowly(fake: CuttingUpstream, api_base: str, text: str):
    """(the events a passthrough stream yielded, the exception that ended it): the first
    event is held until the upstream has sent everything and cut the connection."""
    fake.sent.clear()

    async def run():
        config = UpstreamModelConfig(name="pass", litellm_model="openai/fake-model", api_base=api_base,
                                     timeout_s=5.0, passthrough=True)
        up = PassthroughBackend(config)
        await up.start()
        events = []
        try:
            request = validate(ChatCompletionRequest, {
                "model": "pass", "messages": [{"role": "user", "content": text}], "stream": True})
            async for event in up.run(await up.prepare_chat(request, "t", "req-cut")):
                if not events:   # a slow client: the rest arrives, and the cut, meanwhile
                    assert await asyncio.to_thread(fake.sent.wait, 5.0)
                    await asyncio.sleep(SETTLE_S)
                events.append(event)
        except Exception as exc:   # the test looks at what ended the stream
            return events, exc
        finally:
            await up.stop()
        return events, None
    return asyncio.run(run())


@pytest.mark.parametrize("text", ["cut", "cut-in-line"])
def test_every_chunk_sent_before_a_cut_reaches_a_slow_reader_then_the_error(upstream, text):
    fake, api_base = upstream
    events, error = read_slowly(fake, api_base, text)
    texts = [event.text for event in events if isinstance(event, TextDelta)]
    assert texts == [f"c{index} " for index in range(NUM_CHUNKS)]   # was: c0 alone (the rest lost)
    assert isinstance(error, ApiError) and (error.status, error.code) == (502, "upstream_error"), repr(error)
    assert "never whole" not in "".join(texts)   # a line the cut left without its end is not passed on
