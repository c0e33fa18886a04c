"""A small OpenAI-compatible upstream for tests, as a raw ASGI app (no network needed).

The last user message picks the behaviour, so one server covers every case:
"status:NNN" answers that HTTP error, "tool" answers a tool call, "slow" streams slowly
(0.5 s per chunk; unstreamed, it answers after 3 s),
"midstream-error" breaks a stream after one chunk; anything else is echoed back (with
`logprobs` asked, each echoed word comes with made-up log probabilities; a request with a
`seed` gets " seed N" added to its echo). `/v1/embeddings` answers each input with
`embedding_of` it (a first input "status:NNN" answers that error; "wrongshape" answers
`{"data": "nope"}`). Misbehaving upstreams (`FAULTS`): a 200 whose body is the named
garbage, "nodone" (a stream cut cleanly before its finish reason), "hang" (no answer for
60 s), "trickle" (a healthy stream, one chunk per 0.4 s); a 429 says `Retry-After: 30`.
"refusal" refuses (`message.refusal`, streamed as `delta.refusal`); "reasoned" answers
with reasoning tokens in its usage, a `system_fingerprint` and a `service_tier`;
"echo-request" answers with the request it got as JSON text (`authorization` header and
`body`); "badparam" is a 400 naming `param` and `code`; "keyecho" a 400 whose message
quotes the `Authorization` header it got, and its key alone.
"""
from __future__ import annotations

import asyncio
import json

ERROR_BODIES = {
    400: {"message": "This model's maximum context length is 10 tokens.", "type":
          "invalid_request_error", "param": "messages", "code": "context_length_exceeded"},
    401: {"message": "Incorrect API key provided.", "type": "invalid_request_error",
          "param": None, "code": "invalid_api_key"},
    429: {"message": "Rate limit reached.", "type": "requests", "param": None,
          "code": "rate_limit_exceeded"},
    500: {"message": "The server had an error.", "type": "server_error", "param": None,
          "code": None},
    503: {"message": "Overloaded.", "type": "server_error", "param": None, "code": None},
    404: {"message": "The model `fake-model` does not exist or you do not have access to it.",
          "type": "invalid_request_error", "param": None, "code": "model_not_found"},
}
REFUSAL = ["I'm sorry, ", "I cannot help with that."]
REASONED_USAGE = {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9,
                  "prompt_tokens_details": {"cached_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": 2}}


def _whole(content=None, finish="stop", usage=None, tool_args=None) -> dict:
    message = {"role": "assistant", "content": content}
    if tool_args is not None:
        message["tool_calls"] = [{"id": "c1", "type": "function",
                                  "function": {"name": "f", "arguments": tool_args}}]
    return {"id": "x", "object": "chat.completion", "created": 1, "model": "fake",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage or {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}


FAULTS = {  # the 200 reply (streamed or not) for each misbehaviour's name
    "emptychoices": {"id": "x", "object": "chat.completion", "choices": [],
                     "usage": {"prompt_tokens": 7, "completion_tokens": 3}},
    "error200": {"error": {"message": "hidden error with 200", "type": "server_error"}},
    "listbody": [1, 2, 3],
    "contentnum": _whole(12345),
    "contentobj": _whole({"a": 1}),
    "argsobj": _whole(None, "tool_calls", tool_args={"city": "Paris"}),
    "finishnum": _whole("hi", 5),
    "usagefloat": _whole("hi", usage={"prompt_tokens": 7.5, "completion_tokens": -3}),
    "usagetext": _whole("hi", usage={"prompt_tokens": "abc", "completion_tokens": None}),
    "nostream": _whole("a whole reply to a stream request"),
}


def _last_user_text(body: dict) -> str:
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return str(body.get("prompt", ""))


def _usage(prompt: str, completion: str) -> dict:
    return {"prompt_tokens": len(prompt.split()) + 3, "completion_tokens": len(completion.split()),
            "total_tokens": len(prompt.split()) + 3 + len(completion.split()),
            "prompt_tokens_details": {"cached_tokens": 2}}


async def send_json(send, status: int, body: dict) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


def embedding_of(item: str | list[int], dimensions: int = 4) -> list[float]:
    """A made-up vector that depends on the input: its length, then its first few codes."""
    codes = [ord(c) for c in item] if isinstance(item, str) else list(item)
    return ([float(len(codes))] + [float(code) for code in codes[:dimensions - 1]] + [0.0] * dimensions)[:dimensions]


async def _embeddings(send, body: dict) -> None:
    if body["input"] == "wrongshape":
        await send_json(send, 200, {"data": "nope"})
        return
    items = body["input"]
    items = [items] if isinstance(items, str) or (items and isinstance(items[0], int)) else items
    if isinstance(items[0], str) and items[0].startswith("status:"):
        status = int(items[0].split(":")[1])
        await send_json(send, status, {"error": ERROR_BODIES[status]})
        return
    vectors = [embedding_of(item, body.get("dimensions", 4)) for item in items]
    num_tokens = sum(len(item) for item in items)
    await send_json(send, 200, {"object": "list", "model": "fake-embedder", "data": [
        {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
        "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens}})


def _scored(words: list[str]) -> dict:
    """Chat `logprobs` for `words`: the i-th costs -0.5 * (i + 1), with one alternative."""
    return {"content": [{"token": word, "logprob": -0.5 * (i + 1), "bytes": list(word.encode()),
                         "top_logprobs": [{"token": word, "logprob": -0.5 * (i + 1),
                                           "bytes": list(word.encode())}]}
                        for i, word in enumerate(words)]}


def _chunk(delta: dict, finish_reason: str | None = None, logprobs: dict | None = None) -> bytes:
    chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1,
             "model": "fake", "choices": [{"index": 0, "delta": delta, "logprobs": logprobs,
                                           "finish_reason": finish_reason}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


async def request_body(scope, receive, send) -> bytes | None:
    """An ASGI fake's request body, whole; None for the lifespan protocol, which this
    answers until the shutdown."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return None
    raw = b""
    while True:
        message = await receive()
        raw += message.get("body", b"")
        if not message.get("more_body"):
            return raw


async def app(scope, receive, send) -> None:
    raw = await request_body(scope, receive, send)
    if raw is None:
        return
    body = json.loads(raw or b"{}")
    if scope["path"].endswith("/embeddings"):
        await _embeddings(send, body)
        return
    text = _last_user_text(body)
    headers = dict(scope.get("headers") or [])
    if text in ("badparam", "keyecho"):
        authorization = headers.get(b"authorization", b"").decode()
        message = (f"Bad request with key {authorization} (key {authorization.removeprefix('Bearer ')})"
                   if text == "keyecho" else "Invalid value for 'temperature': must be <= 2.")
        await send_json(send, 400, {"error": {"message": message, "type": "invalid_request_error",
                                               "param": "temperature" if text == "badparam" else None,
                                               "code": "invalid_value" if text == "badparam" else None}})
        return
    if text.startswith("status:"):
        status = int(text.split(":")[1])
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json")]
                    + ([(b"retry-after", b"30")] if status == 429 else [])})
        await send({"type": "http.response.body", "body": json.dumps({"error": ERROR_BODIES[status]}).encode()})
        return
    if text in FAULTS:
        await send_json(send, 200, FAULTS[text])
        return
    if text == "html":
        await send({"type": "http.response.start", "status": 500 if not body.get("stream") else 200,
                    "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": b"<html>Error at /srv/secret/app.py</html>"})
        return
    if text == "hang":
        await asyncio.sleep(60)
    tool_call = {"id": "call_fake1", "type": "function",
                 "function": {"name": "lookup", "arguments": json.dumps({"q": "x"})}}
    reply = f"echo: {text}" + (f" seed {body['seed']}" if "seed" in body else "")
    if text == "echo-request":
        reply = json.dumps({"authorization": headers.get(b"authorization", b"").decode() or None,
                            "body": body})
    if not body.get("stream"):
        if text == "slow":
            await asyncio.sleep(3.0)
        message = ({"role": "assistant", "content": None, "tool_calls": [tool_call]}
                   if text == "tool" else {"role": "assistant", "content": reply})
        if text == "refusal":
            message = {"role": "assistant", "content": None, "refusal": "".join(REFUSAL)}
        whole = {"id": "chatcmpl-fake", "object": "chat.completion", "created": 1, "model": "fake",
                 "choices": [{"index": 0, "message": message,
                              "logprobs": _scored([w + " " for w in reply.split()]) if body.get("logprobs") else None,
                              "finish_reason": "tool_calls" if text == "tool" else "stop"}],
                 "usage": _usage(text, reply)}
        if text == "reasoned":
            whole.update(system_fingerprint="fp_fake", service_tier="default", usage=REASONED_USAGE)
        await send_json(send, 200, whole)
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})
    if text == "refusal":
        parts = [_chunk({"role": "assistant", "content": None})]
        parts += [_chunk({"refusal": piece}) for piece in REFUSAL]
        parts.append(_chunk({}, "stop"))
    elif text == "tool":
        first = dict(tool_call, index=0, function={"name": "lookup", "arguments": ""})
        parts = [_chunk({"role": "assistant", "tool_calls": [first]}),
                 _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"q": '}}]}),
                 _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]}),
                 _chunk({}, "tool_calls")]
    else:
        parts = [_chunk({"role": "assistant", "content": ""})]
        parts += [_chunk({"content": word + " "},
                         logprobs=_scored([word + " "]) if body.get("logprobs") else None)
                  for word in reply.split()]
        parts.append(_chunk({}, "stop"))
    if text == "nodone":
        parts = parts[:-1]
    for index, part in enumerate(parts):
        if text == "nodone" and index == len(parts) - 1:
            await send({"type": "http.response.body", "body": part, "more_body": False})
            return
        if text == "trickle":
            await asyncio.sleep(0.4)
        if text == "midstream-error" and index == 2:
            await send({"type": "http.response.body", "body": b"data: {not json\n\n",
                        "more_body": True})
            break
        await send({"type": "http.response.body", "body": part, "more_body": True})
        if text == "slow":
            await asyncio.sleep(0.5)
    else:
        usage = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1,
                 "model": "fake", "choices": [], "usage": _usage(text, reply)}
        if text == "reasoned":
            usage.update(system_fingerprint="fp_fake", service_tier="default", usage=REASONED_USAGE)
        await send({"type": "http.response.body",
                    "body": b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n",
                    "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
