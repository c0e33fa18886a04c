"""How an upstream's stream ends, through litellm ("lite") and forwarded directly ("pass"):
a stream with no event (or only `[DONE]`) is a 502 on both paths, never litellm's made-up
`stop` with made-up usage; a whole reply (every finish reason, then the usage chunk) ends
at once even when the upstream holds the connection open without `[DONE]`, and the
upstream's connection is closed; a reply whose usage is still to come is waited for."""
import asyncio
import json
import os
import time

import pytest

from gateway.backend import Finished, TextDelta
from gateway.schemas import ChatCompletionRequest, CompletionRequest, validate
from gateway.upstream import import_litellm
from gateway.upstream_replies import StreamEnd
from tests.gateway.fake_openai import request_body
from tests.gateway.serving import start_server
from tests.gateway.test_upstream_faults import KEY_ENV, drive

PATHS = ("lite", "pass")
USAGE = {"prompt_tokens": 41, "completion_tokens": 5, "total_tokens": 46}


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _chunk(delta=None, finish=None, text=None, usage=None) -> bytes:
    """A chat chunk (or a completions chunk when `text` is given); with `usage`, the
    usage chunk (`choices: []`)."""
    if usage is not None:
        return _sse({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "fake",
                     "choices": [], "usage": usage})
    if text is not None:
        return _sse({"id": "x", "object": "text_completion", "created": 1, "model": "fake",
                     "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}]})
    return _sse({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "fake",
                 "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]})


REPLY = [_chunk({"role": "assistant", "content": ""}), _chunk({"content": "all "}),
         _chunk({"content": "of it"}), _chunk({}, "stop")]
STREAMS = {   # the scenario (the prompt) -> the events sent, and whether the upstream then hangs
    "empty": ([], False),
    "emptydone": ([b"data: [DONE]\n\n"], False),
    "emptyreply": ([_chunk({"role": "assistant", "content": ""}), _chunk({}, "stop"),
                    _chunk(usage=USAGE), b"data: [DONE]\n\n"], False),
    "hangafter": ([*REPLY, _chunk(usage=USAGE)], True),
    "hangbeforeusage": (REPLY, True),
    "texthangafter": ([_chunk(text="all "), _chunk(text="of it"), _chunk(text="", finish="stop"),
                       _chunk(usage=USAGE)], True),
}


class FakeUpstream:
    """An ASGI upstream answering each stream request with `STREAMS[prompt]`; `closed`
    lists the scenarios whose connection the gateway closed while the upstream hung."""

    def __init__(self) -> None:
        self.closed: list[str] = []

    async def __call__(self, scope, receive, send) -> None:
        raw = await request_body(scope, receive, send)
        if raw is None:
            return
        body = json.loads(raw)
        scenario = body["messages"][-1]["content"] if "messages" in body else body["prompt"]
        events, hangs = STREAMS[scenario]
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        for event in events:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        if hangs:   # until the gateway closes the connection (or 30 s)
            try:
                message = await asyncio.wait_for(receive(), 30)
            except asyncio.TimeoutError:
                message = {}
            if message.get("type") == "http.disconnect":
                self.closed.append(scenario)
                return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


@pytest.fixture(scope="module")
def upstream():
    os.environ.setdefault(KEY_ENV, "sk-upstream-secret")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    fake = FakeUpstream()
    server = start_server(fake)
    yield fake, f"{server.base_url}/v1"
    server.stop()


def ask(path: str, api_base: str, scenario: str, chat: bool = True, timeout_s: float = 3.0):
    """(the events the backend yielded, the exception that ended them or None, seconds)."""
    if chat:
        request = validate(ChatCompletionRequest, {
            "model": path, "messages": [{"role": "user", "content": scenario}], "stream": True})
        return drive(path, api_base, timeout_s, lambda up: up.prepare_chat(request, "t", "req-1"))
    request = validate(CompletionRequest, {"model": path, "prompt": scenario, "stream": True})
    return drive(path, api_base, timeout_s, lambda up: up.prepare_completion(request, "t", "req-1"))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("scenario", ["empty", "emptydone"])
def test_a_stream_without_events_is_a_502_not_an_empty_success(upstream, path, scenario):
    events, error, _ = ask(path, upstream[1], scenario)
    assert events == []   # nothing reaches the client, its trace or its spent tokens
    assert (getattr(error, "status", None), getattr(error, "code", None)) == (502, "upstream_error"), repr(error)


@pytest.mark.parametrize("path", PATHS)
def test_an_empty_reply_with_the_upstreams_finish_and_usage_is_a_reply(upstream, path):
    events, error, _ = ask(path, upstream[1], "emptyreply")
    assert error is None, repr(error)
    assert events == [events[-1]] and events[-1].finish_reason == "stop"
    assert (events[-1].usage.num_prompt_tokens, events[-1].usage.num_completion_tokens) == (41, 5)


@pytest.mark.parametrize("path", PATHS)
def test_a_whole_reply_ends_at_its_usage_chunk_though_the_upstream_holds_on(upstream, path):
    fake, api_base = upstream
    fake.closed.clear()
    events, error, took_s = ask(path, api_base, "hangafter", timeout_s=2.0)
    assert error is None, repr(error)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "all of it"
    assert isinstance(events[-1], Finished) and events[-1].finish_reason == "stop"
    assert events[-1].usage.num_prompt_tokens == 41   # the upstream's, not an estimate
    assert took_s < 1.5   # not `timeout_s`
    deadline_s = time.monotonic() + 5
    while not fake.closed and time.monotonic() < deadline_s:
        time.sleep(0.05)
    assert fake.closed == ["hangafter"]   # the upstream saw its connection closed


def test_a_whole_completions_reply_ends_at_its_usage_chunk_when_passed_through(upstream):
    events, error, took_s = ask("pass", upstream[1], "texthangafter", chat=False, timeout_s=2.0)
    assert error is None and events[-1].usage.num_prompt_tokens == 41, repr(error)
    assert took_s < 1.5


@pytest.mark.parametrize("path", PATHS)
def test_a_reply_whose_usage_chunk_is_still_to_come_is_not_cut(upstream, path):
    events, error, took_s = ask(path, upstream[1], "hangbeforeusage", timeout_s=1.0)
    assert (getattr(error, "status", None), getattr(error, "code", None)) == (504, "upstream_timeout"), repr(error)
    assert not any(isinstance(event, Finished) for event in events) and took_s >= 0.9


def test_only_the_usage_chunk_after_every_choices_finish_ends_a_stream():
    end = StreamEnd()
    usage_chunk = {"choices": [], "usage": USAGE}
    assert not end.complete_after(usage_chunk)   # no choice yet
    assert not end.complete_after({"choices": [{"index": 0, "finish_reason": "stop"},
                                               {"index": 1, "finish_reason": None}], "usage": USAGE})
    assert not end.complete_after(usage_chunk)   # choice 1 has not finished
    assert not end.complete_after({"choices": [{"index": 1, "finish_reason": "length"}]})
    assert end.complete_after(usage_chunk)
    assert not StreamEnd().complete_after({"choices": [], "usage": None})


def test_litellm_prints_no_banner_for_an_upstream_error():
    assert import_litellm().suppress_debug_info is True
