"""A provider's finish reason reaches the client as the same OpenAI reason on both upstream
paths, for chat and completions, whole and streamed (QA157 F1): litellm's own mapping is
case-sensitive, so a lower-case "recitation", "blocklist", "continuation" or "tool_call"
became "stop" through litellm (a whole chat or completions reply, and a chat stream whose
finish chunk has an empty delta, as OpenAI sends it), while passthrough gave
"content_filter", "length" or "tool_calls". The fake upstream finishes with the reason
its prompt names ("finish:<reason>").

Not covered, and not fixed: litellm's text completion *stream* builds its raw stream
inside a generator of its own, so the provider's reason is out of reach there (litellm's
"stop" stays)."""
import asyncio
import json

import pytest

from gateway.backend import Finished, Usage
from gateway.finish_reasons import in_openai_words, openai_finish_reason
from gateway.model_configs import UpstreamModelConfig
from gateway.passthrough import PassthroughBackend
from gateway.schemas import ChatCompletionRequest, CompletionRequest, validate
from gateway.upstream import UpstreamBackend
from tests.gateway.fake_openai import request_body, send_json
from tests.gateway.serving import served_url

# lower-case provider names litellm made "stop" -> what both paths give now
LOWER_CASE = {"recitation": "content_filter", "blocklist": "content_filter", "spii": "content_filter",
              "language": "content_filter", "image_safety": "content_filter",
              "prohibited_content": "content_filter", "continuation": "length", "tool_call": "tool_calls"}
# names both paths agreed on before, which must stay as they were
AGREED = {"eos": "stop", "end_turn": "stop", "max_tokens": "length", "MAX_TOKENS": "length",
          "tool_use": "tool_calls", "SAFETY": "content_filter", "RECITATION": "content_filter",
          "a_reason_no_one_knows": "stop", "stop": "stop", "length": "length",
          "content_filter": "content_filter", "tool_calls": "tool_calls", "function_call": "function_call"}
EXPECTED = {**LOWER_CASE, **AGREED}
USAGE = {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}


def _sse(obj: dict) -> bytes:
    return b"data: " + json.dumps({"id": "x", "created": 1, "model": "m", **obj}).encode() + b"\n\n"


async def _finishing_upstream(scope, receive, send) -> None:
    """Chat and completions, whole or streamed: "hi", then the reason after "finish:" (a
    stream's finish chunk carries no text, as OpenAI sends it)."""
    raw = await request_body(scope, receive, send)
    if raw is None:
        return
    body = json.loads(raw)
    is_chat = "messages" in body
    reason = (body["messages"][-1]["content"] if is_chat else body["prompt"]).removeprefix("finish:")
    if not body.get("stream"):
        choice = ({"index": 0, "finish_reason": reason, "message": {"role": "assistant", "content": "hi"}}
                  if is_chat else {"index": 0, "finish_reason": reason, "text": "hi", "logprobs": None})
        await send_json(send, 200, {"id": "x", "object": "chat.completion" if is_chat else "text_completion",
                                    "created": 1, "model": "m", "choices": [choice], "usage": USAGE})
        return
    if is_chat:
        kind = {"object": "chat.completion.chunk"}
        choices = [{"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": None},
                   {"index": 0, "delta": {}, "finish_reason": reason}]
    else:
        kind = {"object": "text_completion"}
        choices = [{"index": 0, "text": "hi", "finish_reason": None, "logprobs": None},
                   {"index": 0, "text": "", "finish_reason": reason, "logprobs": None}]
    events = [_sse({**kind, "choices": [choice]}) for choice in choices] + [_sse({**kind, "choices": [],
                                                                                  "usage": USAGE})]
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await send({"type": "http.response.body", "body": b"".join(events) + b"data: [DONE]\n\n"})


@pytest.fixture(scope="module")
def upstream_url():
    yield from served_url(_finishing_upstream)


def finish_reasons_of(api_base: str, passthrough: bool, is_chat: bool, stream: bool, reasons) -> dict[str, str]:
    async def main() -> dict[str, str]:
        config = UpstreamModelConfig(name="up", litellm_model="openai/m", api_base=api_base, passthrough=passthrough)
        backend = (PassthroughBackend if passthrough else UpstreamBackend)(config)
        await backend.start()
        got = {}
        try:
            for reason in reasons:
                if is_chat:
                    request = validate(ChatCompletionRequest, {"model": "up", "stream": stream, "messages": [
                        {"role": "user", "content": f"finish:{reason}"}]})
                    prepared = await backend.prepare_chat(request, "t", "r")
                else:
                    request = validate(CompletionRequest, {"model": "up", "stream": stream,
                                                           "prompt": f"finish:{reason}"})
                    prepared = await backend.prepare_completion(request, "t", "r")
                events = [event async for event in backend.run(prepared)]
                assert isinstance(events[-1], Finished)
                got[reason] = events[-1].finish_reason
        finally:
            await backend.stop()
        return got
    return asyncio.run(main())


@pytest.mark.parametrize("passthrough", [True, False], ids=["pass", "lite"])
@pytest.mark.parametrize("is_chat, stream", [(True, False), (True, True), (False, False)],
                         ids=["chat", "chat-stream", "completions"])
def test_both_paths_give_the_same_openai_reason_for_a_lower_case_provider_name(upstream_url, passthrough,
                                                                                is_chat, stream):
    assert finish_reasons_of(upstream_url, passthrough, is_chat, stream, sorted(EXPECTED)) == EXPECTED


def test_a_completions_stream_through_passthrough_names_them_too(upstream_url):
    assert finish_reasons_of(upstream_url, True, False, True, sorted(EXPECTED)) == EXPECTED


def test_every_name_litellm_maps_to_other_than_stop_is_mapped_the_same_here():
    """The provider's own reason replaces only litellm's "stop": where litellm knows a name
    (in any case here), this table must agree with it, else a reply would change with the path."""
    from litellm.litellm_core_utils import core_helpers
    table = getattr(core_helpers, "_FINISH_REASON_MAP", None)
    if not isinstance(table, dict):
        pytest.skip("this litellm keeps no finish reason table by that name")
    assert {name: openai_finish_reason(name) for name in table} == dict(table)


def test_litellms_own_reason_other_than_stop_is_kept():
    # (a stream that called tools and ended with "stop": litellm says "tool_calls")
    assert in_openai_words(Finished("tool_calls", Usage()), "stop").finish_reason == "tool_calls"
    assert in_openai_words(Finished("stop", Usage()), "recitation").finish_reason == "content_filter"
    assert in_openai_words(Finished("stop", Usage()), None).finish_reason == "stop"


def test_a_reply_without_litellms_kept_reason_gives_none():
    from gateway.finish_reasons import sent_finish_reason
    assert sent_finish_reason({"choices": [{"finish_reason": "recitation"}]}) is None   # plain JSON
    assert sent_finish_reason(None) is None
