"""An upstream reply that leaves usage out, or counts 0 tokens, is charged the 4-bytes-a-token
estimate, never nothing (gateway/upstream_usage.py, its invariant): litellm reports a
usage the provider did not send as zeros (in a stream too: its token counter is off,
QA226), so the litellm path and the passthrough charge alike, and a tenant's
`token_budget` runs out."""
import json
import time

import httpx
import pytest

from gateway.app import build_app
from gateway.backend import Usage
from gateway.config import key_digest, parse_config
from gateway.upstream import estimate_num_tokens
from gateway.upstream_usage import usage_from
from tests.conftest import ServedGateway
from tests.gateway.fake_openai import request_body
from tests.gateway.serving import start_server

KEYS = {"rich": "sk-usage-rich", "poor": "sk-usage-poor"}
MODELS = ("via-litellm", "via-passthrough")
TEXT = "Hello from fake upstream"   # 24 bytes: 6 tokens at 4 bytes a token
TOOL_NAME, TOOL_ARGS = "get_weather", '{"city": "Paris"}'   # 11 + 17 bytes: 7 tokens
WORDS = ["Hel", "lo ", "from ", "fake ", "upstream"]   # a stream of 5 content chunks, 24 bytes
# the usage each behaviour's reply sends (None: none at all), by the last user message
USAGES = {
    "no-usage": None,
    "zero-usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    "zero-prompt": {"prompt_tokens": 0, "completion_tokens": 3, "total_tokens": 3},
    "zero-completion": {"prompt_tokens": 9, "completion_tokens": 0, "total_tokens": 9},
    "real": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
    "empty-reply": {"prompt_tokens": 9, "completion_tokens": 0, "total_tokens": 9},
    "tool-no-usage": None,
}


def _message(behaviour: str) -> dict:
    if behaviour == "empty-reply":
        return {"role": "assistant", "content": ""}
    if behaviour == "tool-no-usage":
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": TOOL_NAME, "arguments": TOOL_ARGS}}]}
    return {"role": "assistant", "content": TEXT}


def _sse(chunk: dict) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


async def fake_upstream(scope, receive, send) -> None:
    """`/chat/completions` answering with `USAGES[last user message]` (streamed: in a usage
    chunk after the finish reason, as the protocol sends it, or no usage chunk)."""
    raw = await request_body(scope, receive, send)
    if raw is None:
        return
    body = json.loads(raw)
    behaviour = body["messages"][-1]["content"]
    usage = USAGES[behaviour]
    head = {"id": "chatcmpl-u", "created": 1, "model": "up"}
    if not body.get("stream"):
        reply = {**head, "object": "chat.completion", "choices": [
            {"index": 0, "message": _message(behaviour),
             "finish_reason": "tool_calls" if behaviour == "tool-no-usage" else "stop"}]}
        if usage is not None:
            reply["usage"] = usage
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": json.dumps(reply).encode()})
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})
    head = {**head, "object": "chat.completion.chunk"}
    deltas = [{"content": word} for word in WORDS]
    if behaviour == "tool-no-usage":   # the call's name, then its arguments in two pieces
        first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": TOOL_NAME, "arguments": ""}}
        deltas = [{"role": "assistant", "content": None, "tool_calls": [first]}] + [
            {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]} for piece in (TOOL_ARGS[:6], TOOL_ARGS[6:])]
    events = [_sse({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}) for delta in deltas]
    events.append(_sse({**head, "choices": [{"index": 0, "delta": {},
                                             "finish_reason": "tool_calls" if behaviour == "tool-no-usage" else "stop"}]}))
    if usage is not None:
        events.append(_sse({**head, "choices": [], "usage": usage}))
    events.append(b"data: [DONE]\n\n")
    await send({"type": "http.response.body", "body": b"".join(events)})


@pytest.fixture(scope="module")
def gateway():
    upstream = start_server(fake_upstream)
    model = {"kind": "upstream", "litellm_model": "openai/up", "api_base": f"{upstream.base_url}/v1"}
    config = parse_config({
        "models": [{"name": "via-litellm", **model}, {"name": "via-passthrough", **model, "passthrough": True}],
        "tenants": [{"name": "rich", "api_key_sha256": [key_digest(KEYS["rich"])]},
                    {"name": "poor", "api_key_sha256": [key_digest(KEYS["poor"])],
                     "limits": {"token_budget": 150}}],
    })
    app = build_app(config)
    server = start_server(app)
    yield ServedGateway(server, app)
    server.stop()
    upstream.stop()


def _messages(behaviour: str) -> list[dict]:
    return [{"role": "user", "content": behaviour}]


def _chat(gateway, tenant: str, model: str, behaviour: str, **extra) -> httpx.Response:
    return httpx.post(f"{gateway.base_url}/v1/chat/completions", timeout=30,
                      headers={"Authorization": f"Bearer {KEYS[tenant]}"},
                      json={"model": model, "messages": _messages(behaviour), "max_tokens": 5, **extra})


def _counts(usage: dict) -> tuple[int, int, int]:
    return usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("behaviour, expected", [
    ("no-usage", ("estimate", 6)),
    ("zero-usage", ("estimate", 6)),
    ("zero-prompt", ("estimate", 3)),
    ("zero-completion", (9, 6)),
    ("real", (9, 2)),
    ("empty-reply", (9, 0)),
    ("tool-no-usage", ("estimate", 7)),
])
def test_a_whole_reply_counts_missing_or_zero_usage_as_the_estimate(gateway, model, behaviour, expected):
    reply = _chat(gateway, "rich", model, behaviour)
    assert reply.status_code == 200, reply.text
    prompt = estimate_num_tokens(_messages(behaviour)) if expected[0] == "estimate" else expected[0]
    assert _counts(reply.json()["usage"]) == (prompt, expected[1], prompt + expected[1])


def _streamed_usage(gateway, model: str, behaviour: str) -> dict:
    with httpx.stream("POST", f"{gateway.base_url}/v1/chat/completions", timeout=30,
                      headers={"Authorization": f"Bearer {KEYS['rich']}"},
                      json={"model": model, "messages": _messages(behaviour), "max_tokens": 5, "stream": True,
                            "stream_options": {"include_usage": True}}) as reply:
        assert reply.status_code == 200
        chunks = [json.loads(line[5:]) for line in reply.iter_lines()
                  if line.startswith("data:") and line[5:].strip() != "[DONE]"]
    return next(chunk["usage"] for chunk in chunks if chunk.get("usage"))


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("behaviour, expected", [
    ("no-usage", ("estimate", 6)),         # no usage chunk: never litellm's tokenizer's count (QA226)
    ("tool-no-usage", ("estimate", 7)),    # the call's name and arguments, 28 bytes
    ("zero-usage", ("estimate", 6)),       # 5 chunks, but 24 bytes are 6 tokens: the larger
    ("zero-prompt", ("estimate", 3)),
    ("real", (9, 2)),
])
def test_a_streamed_reply_counts_missing_or_zero_usage_as_the_estimate(gateway, model, behaviour, expected):
    usage = _streamed_usage(gateway, model, behaviour)
    prompt = estimate_num_tokens(_messages(behaviour)) if expected[0] == "estimate" else expected[0]
    assert _counts(usage) == (prompt, expected[1], prompt + expected[1])


@pytest.mark.parametrize("behaviour", ["no-usage", "tool-no-usage"])
def test_both_paths_charge_a_stream_without_usage_alike(gateway, behaviour):
    """The reply a client gets, and its tenant's charge, are the same through litellm and
    forwarded: the estimate, not litellm's own count of a usage the provider never sent."""
    limiter = gateway.state.limiters["rich"]
    charged = {}
    for model in MODELS:
        spent = limiter.num_spent_tokens
        usage = _streamed_usage(gateway, model, behaviour)
        deadline = time.monotonic() + 5.0   # the charge lands as the reply ends
        while limiter.num_spent_tokens == spent and time.monotonic() < deadline:
            time.sleep(0.01)
        charged[model] = (_counts(usage), limiter.num_spent_tokens - spent)
    assert charged["via-litellm"] == charged["via-passthrough"], charged
    assert charged["via-litellm"][1] == charged["via-litellm"][0][2]


@pytest.mark.parametrize("model", MODELS)
def test_a_streamed_responses_reply_without_usage_counts_the_estimate(gateway, model):
    """The Responses API over an upstream stream that sent no usage (QA226: 55 output tokens
    through litellm for two tool calls): the estimate, as chat's."""
    with httpx.stream("POST", f"{gateway.base_url}/v1/responses", timeout=30,
                      headers={"Authorization": f"Bearer {KEYS['rich']}"},
                      json={"model": model, "input": "tool-no-usage", "stream": True, "store": False}) as reply:
        assert reply.status_code == 200
        events = [json.loads(line[5:]) for line in reply.iter_lines() if line.startswith("data:")]
    usage = next(event["response"]["usage"] for event in events if event.get("type") == "response.completed")
    assert usage["output_tokens"] == 7, usage


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("behaviour", ["no-usage", "zero-usage"])
def test_a_token_budget_runs_out_on_replies_that_count_no_tokens(gateway, model, behaviour):
    """Each reply is charged its estimate (18 + 6 tokens), so the budget of 150 refuses the
    7th request (144 spent, 23 more reserved), where nothing was charged before."""
    limiter = gateway.state.limiters["poor"]
    limiter.num_spent_tokens = 0
    charge = estimate_num_tokens(_messages(behaviour)) + 6
    statuses = []
    while len(statuses) < 10 and 429 not in statuses:
        spent = limiter.num_spent_tokens
        statuses.append(_chat(gateway, "poor", model, behaviour).status_code)
        deadline = time.monotonic() + 5.0   # the charge lands as the reply ends
        while statuses[-1] == 200 and limiter.num_spent_tokens == spent and time.monotonic() < deadline:
            time.sleep(0.01)
    assert statuses == [200] * (150 // charge) + [429], (statuses, limiter.num_spent_tokens)
    assert limiter.num_spent_tokens == (150 // charge) * charge


def test_a_missing_prompt_count_is_at_least_the_cached_tokens_it_counted():
    """A provider that counts only its uncached prompt tokens (0 with all of them cached)."""
    raw = {"prompt_tokens": 0, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 500}}
    usage = usage_from(raw, Usage(num_prompt_tokens=20, num_completion_tokens=1))
    assert (usage.num_prompt_tokens, usage.num_cached_tokens, usage.num_completion_tokens) == (500, 500, 4)


def test_a_missing_completion_count_is_at_least_the_reasoning_tokens_it_counted():
    raw = {"prompt_tokens": 12, "completion_tokens": 0, "completion_tokens_details": {"reasoning_tokens": 40}}
    usage = usage_from(raw, Usage(num_prompt_tokens=20, num_completion_tokens=3))
    assert (usage.num_prompt_tokens, usage.num_completion_tokens, usage.num_reasoning_tokens) == (12, 40, 40)


def test_output_is_estimated_at_4_bytes_a_token_rounded_up():
    from gateway.upstream_usage import estimated_output_tokens

    assert [estimated_output_tokens(n) for n in (0, 1, 4, 5, 24)] == [0, 1, 1, 2, 6]
