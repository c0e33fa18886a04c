"""Reading an upstream provider's reply (a litellm object or plain JSON, whole or
streamed) as the gateway's events: the OpenAI protocol checked as it is read.

What passes on: text, refusal (`message.refusal`, `delta.refusal`), tool calls, log
probabilities, the finish reason, usage (with `completion_tokens_details`), and the
reply's `system_fingerprint` and `service_tier`.
Invariant: a reply that is not the OpenAI protocol (no choice, an error body with 200,
non-string text, refusal, tool-call fields or finish reason, usage counts that are not
non-negative integers, a stream with no finish reason or not SSE at all) raises a 502
`upstream_error` (`litellm_errors.upstream_garbage`) before any of it reaches the
client, its trace or its tenant's spent tokens; nothing else leaves these readers. A 200
error object is named by its message (`error_of`), also when it answers a stream request
(`not_sse`), unless it is a rate limit: the upstream's 429, in the gateway's words.
A stream ends with its last event: once every choice has its finish reason and the usage
chunk (choices `[]`) came, nothing more is waited for (`StreamEnd`), `[DONE]` or not,
also behind litellm's stream wrapper (`end_when_complete`).
Usage is read as gateway/upstream_usage.py says: a count of 0, or none, is never free.
"""
from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from gateway.backend import ChatEvent, Finished, RefusalDelta, TextDelta, ToolCallDelta, Usage
from gateway.errors import ApiError
from gateway.litellm_causes import not_json
from gateway.litellm_errors import NOT_JSON_EVENT, error_in_200_reply, map_litellm_error, upstream_garbage
from gateway.litellm_odd_replies import stream_body_start
from gateway.upstream_stream_reuse import disarm_at_end
from gateway.upstream_usage import (estimated_output_tokens, field_of, is_record, logprobs_from, output_bytes,
                                    text_of, usage_from)


# the most of a stream request's answer that is not SSE read for an error object's message
MAX_ERROR_BODY_BYTES = 64 * 1024


def _label(value: Any) -> str | None:
    """A reply's `system_fingerprint` or `service_tier`: a string, else None (not worth a 502)."""
    return value if isinstance(value, str) and value else None


def events_from_response(response: Any, is_chat: bool, num_prompt_tokens_estimate: int) -> list[ChatEvent]:
    """Events of a whole (non-streamed) reply, a litellm object or plain JSON; checked
    whole first, so a malformed reply is a 502 (`upstream_garbage`) and nothing else.
    `num_prompt_tokens_estimate`: the request's prompt at 4 bytes a token, charged when
    the reply does not count it (`usage_from`)."""
    try:
        return list(_whole_events(response, is_chat, num_prompt_tokens_estimate))
    except ApiError:
        raise
    except Exception as exc:   # NOTE: any other shape fault in the upstream's reply
        raise upstream_garbage(f"{type(exc).__name__}: {exc}") from None


def _whole_events(response: Any, is_chat: bool, num_prompt_tokens_estimate: int):
    output = list(_whole_output(response, is_chat))
    yield from output
    choice = field_of(response, "choices")[0]
    estimate = Usage(num_prompt_tokens=num_prompt_tokens_estimate,
                     num_completion_tokens=estimated_output_tokens(sum(map(output_bytes, output))))
    yield Finished(text_of(field_of(choice, "finish_reason"), "finish_reason") or "stop",
                   usage_from(field_of(response, "usage"), estimate),
                   system_fingerprint=_label(field_of(response, "system_fingerprint")),
                   service_tier=_label(field_of(response, "service_tier")))


def _whole_output(response: Any, is_chat: bool):
    if (error := error_of(response)) is not None:
        raise error
    choices = field_of(response, "choices")
    if not isinstance(choices, list) or not choices or not is_record(choices[0]):
        raise upstream_garbage("no choices" if is_record(response) else "not a JSON object")
    choice = choices[0]
    if is_chat:
        message = field_of(choice, "message")
        if not is_record(message):
            raise upstream_garbage("choices[0].message is not an object")
        content = text_of(field_of(message, "content"), "message.content")
        scores = logprobs_from(choice, is_chat)
        if content or scores is not None:   # an empty reply's logprobs (an empty list) as the upstream sent them
            yield TextDelta(content or "", scores)
        refusal = text_of(field_of(message, "refusal"), "message.refusal")
        if refusal:
            yield RefusalDelta(refusal)
        yield from _tool_call_deltas(field_of(message, "tool_calls"), whole=True)
    else:
        text = text_of(field_of(choice, "text"), "choices[0].text")
        scores = logprobs_from(choice, is_chat)
        if text or scores is not None:
            yield TextDelta(text or "", scores)


def _tool_call_deltas(calls: Any, whole: bool):
    if calls is None:
        return
    if not isinstance(calls, list):
        raise upstream_garbage("tool_calls is not a list")
    for position, call in enumerate(calls):
        function = field_of(call, "function")
        if not is_record(call) or (function is not None and not is_record(function)):
            raise upstream_garbage("a tool call is not an object")
        index = position if whole else field_of(call, "index", 0) or 0
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise upstream_garbage("a tool call's index is not a non-negative integer")
        yield ToolCallDelta(index, text_of(field_of(call, "id"), "tool call id"),
                            text_of(field_of(function, "name"), "tool call name"),
                            text_of(field_of(function, "arguments"), "tool call arguments") or "")


def name_piece(name_so_far: str, name: str | None) -> str:
    """What a streamed tool call's delta `name` adds to the call's name so far, so that the
    pieces joined (as the openai SDK joins them, and as `collected` and chat chunks pass them
    on) are the name. OpenAI sends the whole name in the call's first delta; providers that
    split it send pieces (each added); some repeat the whole name in every delta, or send
    the name so far each time (only what is new is added)."""
    if not name or name == name_so_far:
        return ""
    if name_so_far and name.startswith(name_so_far):
        return name[len(name_so_far):]
    return name


def error_of(reply: Any) -> ApiError | None:
    """A 200 whose body is an OpenAI error object, as the client gets it (`error_in_200_reply`:
    a rate limit the upstream's 429 in the gateway's words, any other named "an error with
    status 200: <its message>", the error itself where it is no object); None for any other reply."""
    error = field_of(reply, "error")
    if error is None:
        return None
    message = field_of(error, "message") if is_record(error) else error
    return error_in_200_reply(error if isinstance(error, dict) else {}, str(message))


def not_sse(content_type: str, body: bytes) -> ApiError:
    """The 502 for a stream request that the upstream answered 200 with `content_type`, not
    SSE: answered as a whole reply's error object is (`error_of`: a rate limit a 429) when
    `body` (read up to MAX_ERROR_BODY_BYTES and a piece) is one, else named by its content type."""
    try:
        error = error_of(json.loads(body)) if len(body) <= MAX_ERROR_BODY_BYTES else None
    except (ValueError, RecursionError):   # not JSON (nor UTF-8), or nested past Python's limit
        error = None
    return error or upstream_garbage(f"a stream was asked for, the reply is {content_type.split(';')[0]}")


async def require_sse(response: Any) -> None:
    """A litellm stream whose upstream answered 200 with something other than SSE (a
    whole JSON reply, a JSON error, HTML) is a 502, not an empty reply; an error object
    is named by its message (`not_sse`: the OpenAI SDK stream's body is read for it)."""
    hidden = getattr(response, "_hidden_params", None)
    headers = (hidden.get("additional_headers") if isinstance(hidden, dict) else None) or {}
    content_type = str(headers.get("llm_provider-content-type") or "")
    if content_type and not content_type.lower().startswith("text/event-stream"):
        raise not_sse(content_type, await stream_body_start(getattr(response, "completion_stream", None),
                                                            MAX_ERROR_BODY_BYTES))



@dataclass(slots=True)
class StreamEnd:
    """Whether a stream's reply is complete before the stream itself ends. The gateway
    always asks for `include_usage`, and by the protocol the usage chunk (`choices: []`)
    is the last event, after every choice's finish reason: once it came, an upstream that
    holds the connection open without `[DONE]` has nothing more to send. A usage chunk
    before a choice finished, or usage on a choice's own chunk, ends nothing.
    `sent_reason`: the last finish reason noted, as the chunk named it (behind litellm's
    wrapper, the provider's own: gateway/finish_reasons.py)."""

    seen: set = field(default_factory=set)
    finished: set = field(default_factory=set)
    sent_reason: str | None = None

    def complete_after(self, chunk: Any) -> bool:
        """Note `chunk` (a litellm chunk, an OpenAI SDK chunk or plain JSON); True when it
        is the usage chunk that follows every choice's finish reason."""
        choices = field_of(chunk, "choices") or []
        if not isinstance(choices, list):
            return False
        for choice in choices:
            index = field_of(choice, "index", 0)
            key = index if isinstance(index, int) else None
            self.seen.add(key)
            reason = field_of(choice, "finish_reason")
            if reason is not None:
                self.finished.add(key)
                self.sent_reason = reason if isinstance(reason, str) else self.sent_reason
        return (not choices and is_record(field_of(chunk, "usage")) and bool(self.seen)
                and self.seen <= self.finished)


async def events_from_stream(response: Any, is_chat: bool, num_prompt_tokens_estimate: int, started_s: float,
                             finish_may_be_made_up: bool = False) -> AsyncIterator[ChatEvent]:
    """Events of a streamed reply: an async iterator of litellm chunks or plain JSON.
    A stream that ends before a finish reason is an upstream error, not a whole reply.
    `finish_may_be_made_up` (litellm): litellm answers a stream that had no chunk at all
    (no event, only `[DONE]`, or a text completion's reply that is not SSE, whose body it
    keeps to itself) with a `stop` of its own and no usage, so a stream with no delta and
    no usage from the upstream (which was asked for it) is that error too; an
    empty reply with the upstream's usage is a reply. `num_prompt_tokens_estimate` as in
    `events_from_response`."""
    finish_reason = None
    usage = None
    ttft_s = None
    num_chunks = num_output_bytes = 0
    fingerprint = tier = None
    end = StreamEnd()
    call_names: dict[int, str] = {}   # each tool call's name so far, by its index (`name_piece`)
    try:
        async for chunk in response:
            if not is_record(chunk):
                raise upstream_garbage("a stream chunk is not an object")
            usage = field_of(chunk, "usage") or usage
            fingerprint = _label(field_of(chunk, "system_fingerprint")) or fingerprint
            tier = _label(field_of(chunk, "service_tier")) or tier
            choices = field_of(chunk, "choices") or []
            if not isinstance(choices, list):
                raise upstream_garbage("a stream chunk's choices is not a list")
            for choice in choices:
                delta = field_of(choice, "delta") if is_chat else choice
                if not is_record(choice) or not (delta is None or is_record(delta)):   # QA113: were skipped
                    raise upstream_garbage("a stream chunk's choice or its delta is not an object")
                finish_reason = text_of(field_of(choice, "finish_reason"), "finish_reason") or finish_reason
                text = text_of(field_of(delta, "content" if is_chat else "text"), "delta content")
                if text:
                    ttft_s = ttft_s if ttft_s is not None else time.perf_counter() - started_s
                    num_chunks += 1
                    num_output_bytes += len(text.encode())
                    yield TextDelta(text, logprobs_from(choice, is_chat))
                refusal = text_of(field_of(delta, "refusal"), "delta refusal") if is_chat else None
                if refusal:
                    ttft_s = ttft_s if ttft_s is not None else time.perf_counter() - started_s
                    num_chunks += 1
                    num_output_bytes += len(refusal.encode())
                    yield RefusalDelta(refusal)
                for delta_call in _tool_call_deltas(field_of(delta, "tool_calls") if is_chat else None,
                                                    whole=False):
                    ttft_s = ttft_s if ttft_s is not None else time.perf_counter() - started_s
                    so_far = call_names.get(delta_call.index, "")
                    delta_call.name = name_piece(so_far, delta_call.name)
                    call_names[delta_call.index] = so_far + delta_call.name
                    num_output_bytes += output_bytes(delta_call)
                    yield delta_call
            if end.complete_after(chunk):
                break
    except ApiError:
        raise
    except Exception as exc:   # an event that is not JSON in one wording on both paths (QA226)
        raise upstream_garbage(NOT_JSON_EVENT) if not_json(exc) else map_litellm_error(exc) from None
    if finish_reason is None:
        raise upstream_garbage("the stream ended before a finish_reason")
    if finish_may_be_made_up and ttft_s is None and usage is None:   # ttft_s: no delta came
        raise upstream_garbage("no chunk came: an empty stream, or a reply that is not SSE")
    estimate = Usage(num_prompt_tokens=num_prompt_tokens_estimate,
                     num_completion_tokens=max(num_chunks, estimated_output_tokens(num_output_bytes)))
    yield Finished(finish_reason, usage_from(usage, estimate), ttft_s=ttft_s,
                   system_fingerprint=fingerprint, service_tier=tier)


def end_when_complete(response: Any) -> StreamEnd | None:
    """litellm's stream wrapper keeps the usage chunk back until the upstream's stream
    ends, so an upstream that sent its whole reply (every finish reason, then the usage
    chunk) and holds the connection open without `[DONE]` kept the reply waiting
    `timeout_s`, then failed it. Its raw chunk stream is ended (and closed) after that usage
    chunk (`StreamEnd`), so the wrapper finishes the reply at once, and its connection goes
    back to the pool with no read timer left running (`disarm_at_end`). Returns the
    `StreamEnd` that notes the raw chunks (their finish reason as the provider sent it,
    before litellm maps it). A wrapper without a started raw stream (litellm's text
    completions build theirs later) is left as it is: None."""
    source = getattr(response, "completion_stream", None)
    if source is not None and hasattr(source, "__aiter__") and hasattr(response, "chunks"):
        disarm_at_end(source)
        end = StreamEnd()
        response.completion_stream = _until_complete(source, end)
        return end
    return None


async def _until_complete(source: Any, end: StreamEnd) -> AsyncIterator[Any]:
    try:
        async for chunk in source:
            yield chunk
            if end.complete_after(chunk):
                return
    finally:
        await close_quietly(source)


async def close_quietly(response: Any) -> None:
    closer = getattr(response, "aclose", None)
    if closer is None:
        return
    try:
        await closer()
    except Exception:   # NOTE: closing a finished or broken stream must not mask the result
        pass
