"""A finish reason outside OpenAI's set reaches the client in OpenAI's words on both upstream
paths (QA147 finding 7): litellm made an upstream's "eos" a "stop", the passthrough path
passed "eos" on, a value outside the enum an OpenAI-typed client knows. The fake upstream
finishes with the reason its prompt names ("finish:eos")."""
import json

import pytest

from gateway.backend import Finished, TextDelta, Usage
from gateway.finish_reasons import OPENAI_FINISH_REASONS, in_openai_words, openai_finish_reason
from tests.gateway.fake_openai import request_body, send_json
from tests.gateway.serving import served_url
from tests.gateway.test_upstream_finish_reason_names import finish_reasons_of

# an upstream's reason -> what the client gets
EXPECTED = {"eos": "stop", "eos_token": "stop", "end_turn": "stop", "STOP": "stop", "stop_sequence": "stop",
            "max_tokens": "length", "MAX_TOKENS": "length", "tool_use": "tool_calls", "SAFETY": "content_filter",
            "content_filtered": "content_filter", "a_reason_no_one_knows": "stop",
            **{reason: reason for reason in OPENAI_FINISH_REASONS}}


def test_openai_reasons_stay_and_others_are_named_as_openai_names_them():
    assert {reason: openai_finish_reason(reason) for reason in EXPECTED} == EXPECTED
    finished = in_openai_words(Finished("eos", Usage()))
    assert finished.finish_reason == "stop"
    assert in_openai_words(TextDelta("eos")).text == "eos"


async def _finishing_upstream(scope, receive, send) -> None:
    """A chat upstream that answers "hi" and finishes with the reason after "finish:"."""
    raw = await request_body(scope, receive, send)
    if raw is None:
        return
    body = json.loads(raw)
    reason = body["messages"][-1]["content"].removeprefix("finish:")
    usage = {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8}
    if not body.get("stream"):
        await send_json(send, 200, {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
                                    "choices": [{"index": 0, "finish_reason": reason,
                                                 "message": {"role": "assistant", "content": "hi"}}],
                                    "usage": usage})
        return
    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": None}]},
              {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]},
              {"choices": [], "usage": usage}]
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    payload = b"".join(b"data: " + json.dumps({"id": "x", "object": "chat.completion.chunk", "created": 1,
                                               "model": "m", **chunk}).encode() + b"\n\n" for chunk in chunks)
    await send({"type": "http.response.body", "body": payload + b"data: [DONE]\n\n"})


@pytest.fixture(scope="module")
def upstream_url():
    yield from served_url(_finishing_upstream)


def _finish_reasons(api_base: str, passthrough: bool, stream: bool, reasons) -> dict[str, str]:
    """Each reason's finish reason as a chat reply through the backend (`finish_reasons_of`)."""
    return finish_reasons_of(api_base, passthrough, True, stream, reasons)


@pytest.mark.parametrize("stream", [False, True])
def test_passthrough_gives_the_client_openai_finish_reasons(upstream_url, stream):
    assert _finish_reasons(upstream_url, True, stream, ["eos", "end_turn", "max_tokens", "stop", "length"]) == {
        "eos": "stop", "end_turn": "stop", "max_tokens": "length", "stop": "stop", "length": "length"}


@pytest.mark.parametrize("stream", [False, True])
def test_both_paths_give_the_same_finish_reason(upstream_url, stream):
    reasons = sorted(EXPECTED)
    assert _finish_reasons(upstream_url, True, stream, reasons) == _finish_reasons(upstream_url, False, stream, reasons)
