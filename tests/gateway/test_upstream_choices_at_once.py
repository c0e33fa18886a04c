"""`n` > 1 on an upstream model starts every choice's call at once (QA147 finding 3): the
others used to wait for choice 0's first event, which on an unstreamed call is its whole
reply, so `n` = 2 took twice an upstream's latency. The staggering serves a local engine's
prefix cache alone; a backend says it has none (`starts_choices_at_once`).

The fake upstream answers a request only once all the `n` calls of its request are in, or
after WAIT_S alone; each reply says which, so a staggered run is seen without timing it."""
import asyncio
import json

import pytest

from gateway.backend import Finished, Prepared, TextDelta, Usage
from gateway.choices import run_choices, with_choices
from gateway.model_configs import UpstreamModelConfig
from gateway.passthrough import PassthroughBackend
from gateway.schemas import ChatCompletionRequest, validate
from gateway.upstream import UpstreamBackend
from tests.gateway.fake_openai import request_body, send_json
from tests.gateway.serving import served_url

N = 3
WAIT_S = 2.0   # how long the fake holds a call for the rest of its request's calls


def _backend(passthrough: bool, api_base: str = "http://127.0.0.1:9/v1") -> UpstreamBackend:
    config = UpstreamModelConfig(name="up", litellm_model="openai/slow", api_base=api_base,
                                 passthrough=passthrough, timeout_s=30)
    return (PassthroughBackend if passthrough else UpstreamBackend)(config)


@pytest.mark.parametrize("passthrough", [False, True])
def test_an_upstream_backend_starts_its_choices_at_once(passthrough):
    assert _backend(passthrough).starts_choices_at_once is True


class _Gathering:
    """Runs that each wait (up to `wait_s`) until all `n` have started, then say whether they did."""

    starts_choices_at_once = True

    def __init__(self, n: int, wait_s: float) -> None:
        self.n, self.wait_s, self.started = n, wait_s, 0
        self.all_started = asyncio.Event()

    async def run(self, prepared: Prepared):
        self.started += 1
        if self.started == self.n:
            self.all_started.set()
        try:
            await asyncio.wait_for(self.all_started.wait(), self.wait_s)
            yield TextDelta("together")
        except TimeoutError:
            yield TextDelta("alone")
        yield Finished("stop", Usage(10, 1, 0))


def test_a_backend_that_starts_choices_at_once_has_them_all_under_way_before_any_event():
    async def texts() -> list[str]:
        prepared = with_choices(Prepared("req", "t", "m", num_prompt_tokens=10, num_reserved_tokens=30,
                                         prompt_is_counted=False), N)
        return [event.text async for event in run_choices(_Gathering(N, 1.0), prepared)
                if isinstance(event, TextDelta)]
    assert asyncio.run(texts()) == ["together"] * N


class _GatheringUpstream:
    """An OpenAI chat upstream that holds each call until N calls with its prompt came (or
    WAIT_S passed), then answers "together" (or "alone"), streamed when asked."""

    def __init__(self) -> None:
        self.arrived: dict[str, int] = {}
        self.all_here: dict[str, asyncio.Event] = {}

    async def __call__(self, scope, receive, send) -> None:
        raw = await request_body(scope, receive, send)
        if raw is None:
            return
        body = json.loads(raw)
        prompt = body["messages"][-1]["content"]
        self.arrived[prompt] = self.arrived.get(prompt, 0) + 1
        event = self.all_here.setdefault(prompt, asyncio.Event())
        if self.arrived[prompt] >= N:
            event.set()
        try:
            await asyncio.wait_for(event.wait(), WAIT_S)
            text = "together"
        except TimeoutError:
            text = "alone"
        usage = {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8}
        if not body.get("stream"):
            await send_json(send, 200, {"id": "x", "object": "chat.completion", "created": 1, "model": "slow",
                                        "choices": [{"index": 0, "finish_reason": "stop",
                                                     "message": {"role": "assistant", "content": text}}],
                                        "usage": usage})
            return
        chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]},
                  {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                  {"choices": [], "usage": usage}]
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        payload = b"".join(b"data: " + json.dumps({"id": "x", "object": "chat.completion.chunk", "created": 1,
                                                   "model": "slow", **chunk}).encode() + b"\n\n" for chunk in chunks)
        await send({"type": "http.response.body", "body": payload + b"data: [DONE]\n\n"})


@pytest.fixture(scope="module")
def upstream_url():
    yield from served_url(_GatheringUpstream())


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("passthrough", [False, True])
def test_every_upstream_call_of_a_request_is_made_at_once(upstream_url, passthrough, stream):
    async def texts() -> dict[int, str]:
        backend = _backend(passthrough, upstream_url)
        await backend.start()
        prompt = f"gather {passthrough} {stream}"   # its own group at the fake
        request = validate(ChatCompletionRequest, {"model": "up", "n": N, "stream": stream,
                                                   "messages": [{"role": "user", "content": prompt}]})
        try:
            prepared = with_choices(await backend.prepare_chat(request, "t", "r"), N)
            by_choice: dict[int, str] = {}
            async for event in run_choices(backend, prepared):
                if isinstance(event, TextDelta):
                    by_choice[event.choice] = by_choice.get(event.choice, "") + event.text
            return by_choice
        finally:
            await backend.stop()
    assert asyncio.run(texts()) == {choice: "together" for choice in range(N)}
