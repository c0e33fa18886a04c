"""A Responses API reply rendered as OpenAI's objects: the response object, its output
items (one `message` for the text, one `function_call` per call), and the request's
`input` as `GET /v1/responses/{id}/input_items` lists it. The request side (a Responses
request as a chat request): gateway/responses_format.py.

Invariants: a message item's text part is there once the item is done (`completed` or
`incomplete`), never while `in_progress`; its `logprobs` is always a list (empty unless
asked); a model's refusal is a `refusal` content part after the text (the only part when
there is no text), as OpenAI sends it; the last item of a reply that stopped short (out of
tokens, or cut by a content filter: `incomplete_reason`) is `incomplete`, the others
`completed`; every listed input item has a `type`, an `id` and (but a reasoning item) a
`status`, and a listed message's text parts are its role's kind (`listed_part`); a response's own input
item ids (`<prefix>_<suffix>_<position>`) and output item ids (`output_item_id`) never
share a shape, so none of its output items has the id of one of its input items.
"""
from __future__ import annotations

import time
from typing import Literal

from gateway.backend import TokenChoice, Usage
from gateway.collected import MESSAGE, Collected
from gateway.item_fields import SDK_NAMES
from gateway.openai_format import logprob_entries
from gateway.responses_chat_fields import echoed_reasoning
from gateway.responses_format import ResponsesRequest
from gateway.responses_input import TEXT_PARTS
from gateway.schemas import served_tier


# a generation's finish reason that cut its reply short, to the response's `incomplete_details.reason`
INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}


def incomplete_reason(collected: Collected) -> str | None:
    """Why the reply stopped short, as OpenAI's `incomplete_details.reason` says it: it ran out
    of tokens (`max_output_tokens`), or a content filter cut it (an upstream's
    `content_filter`, with tool calls made or not); None when it ended of itself."""
    finished = collected.finished
    return INCOMPLETE_REASONS.get(finished.finish_reason) if finished is not None else None


def final_status(collected: Collected) -> str:
    """`incomplete` when the reply stopped short (`incomplete_reason`), else `completed`."""
    return "incomplete" if incomplete_reason(collected) is not None else "completed"


def output_item_id(response_id: str, kind: str, index: int = 0) -> str:
    """The id of an output item of response `response_id` (`resp_<suffix>`): `msg_<suffix>`
    for its message (`kind` "message"), `fc_<suffix>_out<index>` for the call the chat
    reply numbers `index`. The same in a stream and in the whole response. Never of the
    shape of an input item's default id (`<prefix>_<suffix>_<position>`, `input_items`),
    so a response's output item never takes the id of one of its input items (a
    conversation keeps both; a client sends both back). Responses stored before this
    shape named their calls `fc_<suffix>_<index>`: ids are opaque, those rows read as stored."""
    suffix = response_id.removeprefix("resp_")
    return f"msg_{suffix}" if kind == "message" else f"fc_{suffix}_out{index}"


def output_items(collected: Collected, response_id: str) -> list[dict]:
    """The reply as Responses output items: its message (its text and refusal) and its
    calls, in the order their first deltas came (`Collected.order`, as a stream adds
    them); a reply with neither is one empty message (a turn the conversation keeps, as a
    stream announces it). When the reply stopped short (`incomplete_reason`), the last
    item (the one it was writing) is `incomplete`, as OpenAI marks it; the others are
    `completed`. Ids: `output_item_id`."""
    items: list[dict] = []
    for key in collected.order or [MESSAGE]:
        if key == MESSAGE:
            items.append(message_item(output_item_id(response_id, "message"), collected.text or "", "completed",
                                      collected.logprobs, collected.refusal))
        else:
            call = collected.tool_calls[key]
            items.append(call_item(output_item_id(response_id, "call", key), call.id, call.name, call.arguments,
                                   "completed"))
    if items:
        items[-1]["status"] = final_status(collected)
    return items


def text_part(text: str, logprobs: list[TokenChoice] | None = None) -> dict:
    """An `output_text` content part; `logprobs` is always a list, empty unless asked."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprob_entries(logprobs or [])}


def refusal_part(refusal: str) -> dict:
    """A `refusal` content part: why the model gave no answer."""
    return {"type": "refusal", "refusal": refusal}


def message_item(item_id: str, text: str, status: str, logprobs: list[TokenChoice] | None = None,
                 refusal: str | None = None, content: list[dict] | None = None) -> dict:
    """A message output item; its content is there once it is done (`completed`, or
    `incomplete` when the reply stopped short in it), not while `in_progress`: the
    given `content` parts, else its text part, then a refusal part when the model refused
    (only that when it wrote no text)."""
    if status == "in_progress":
        content = []
    elif content is None:
        content = (([text_part(text, logprobs)] if text or refusal is None else [])
                   + ([refusal_part(refusal)] if refusal is not None else []))
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name,
            "arguments": arguments, "status": status}


ResponseStatus = Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]
DEFAULT_SAMPLING = 1.0   # `temperature` and `top_p` when the request names none: a local model's and OpenAI's


def response_usage(usage: Usage) -> dict:
    """A response's `usage`. `input_tokens_details.cache_write_tokens` (OpenAI: "the number
    of input tokens that were written to the cache") is an upstream's own count (0 when it
    sent none) and, for a local model, its worker's: the full blocks of the prompt it
    registered in its prefix cache as new (never a last partial block, a block found cached
    or one it had no room for; 0 with prefix caching off, or when unknown: a reply cut short
    before its worker finished) (`Usage.cache_write_tokens`)."""
    return {"input_tokens": usage.num_prompt_tokens,
            "input_tokens_details": {"cached_tokens": usage.num_cached_tokens,
                                     "cache_write_tokens": usage.cache_write_tokens},
            "output_tokens": usage.num_completion_tokens,
            "output_tokens_details": {"reasoning_tokens": usage.num_reasoning_tokens},
            "total_tokens": usage.num_total_tokens}


def response_object(response_id: str, request: ResponsesRequest, *, created_at: int | None = None,
                    status: ResponseStatus = "completed", output: list[dict] | None = None,
                    usage: Usage | None = None, error: dict | None = None,
                    service_tier: str | None = None, incomplete: str | None = None,
                    completed_at: float | None = None) -> dict:
    """A response object; `incomplete` when the reply stopped short, `incomplete_details`
    saying why (`incomplete`: `incomplete_reason`, `max_output_tokens` when not given);
    `error` ({"code", "message"}) only when it `failed`; `completed_at` only when it
    `completed` (`completed_at` when given: its `Finished.ended_at`; else now); `service_tier` the one an upstream
    said it served the reply in, else the one the gateway serves it in; `temperature` and
    `top_p` the values used (`DEFAULT_SAMPLING` when the request names none; an upstream
    is sent none then, and OpenAI's default is the same); `reasoning` the request's effort
    and summary (null when not sent), as OpenAI echoes them, though the gateway passes no
    reasoning settings on (local models do not reason apart); `usage`: `response_usage`."""
    return {
        "id": response_id, "object": "response", "created_at": created_at or int(time.time()),
        "status": status, "completed_at": int(completed_at or time.time()) if status == "completed" else None,
        "background": request.background, "model": request.model, "output": output or [],
        "error": error, "incomplete_details": ({"reason": incomplete or "max_output_tokens"}
                                                if status == "incomplete" else None),
        "instructions": request.instructions, "max_output_tokens": request.max_output_tokens,
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "previous_response_id": request.previous_response_id, "store": request.store,
        "conversation": {"id": request.conversation_id()} if request.conversation is not None else None,
        "temperature": DEFAULT_SAMPLING if request.temperature is None else request.temperature,
        "top_p": DEFAULT_SAMPLING if request.top_p is None else request.top_p,
        "reasoning": echoed_reasoning(request.reasoning), "tool_choice": request.tool_choice or "auto",
        "tools": request.tools or [], "text": {**(request.text or {}), "format": (request.text or {}).get("format") or {"type": "text"}},
        "metadata": request.metadata or {}, "user": request.user,
        "truncation": request.truncation or "disabled", "top_logprobs": request.top_logprobs,
        "service_tier": service_tier or served_tier(request.service_tier),
        "prompt_cache_key": request.prompt_cache_key,
        "safety_identifier": request.safety_identifier, "max_tool_calls": request.max_tool_calls,
        "usage": None if usage is None else response_usage(usage)}


ITEM_ID_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


def input_items(request: ResponsesRequest, response_id: str) -> tuple[dict, ...]:
    """`input` as `GET /v1/responses/{id}/input_items` lists it: a string is one user
    message; message content is a list of parts (`input_text`, or `output_text` for the
    assistant); every item has a `type` and an `id` (the client's, else one derived from
    the response id and its position, `<prefix>_<suffix>_<position>`: never an output
    item's shape, `output_item_id`)."""
    items = request.input if isinstance(request.input, list) else [
        {"type": "message", "role": "user", "content": request.input}]
    suffix = response_id.removeprefix("resp_")
    return tuple(listed_item(raw, f"{ITEM_ID_PREFIXES.get(raw.get('type', 'message'), 'item')}_{suffix}_{index}")
                 for index, raw in enumerate(items))


def listed_part(part: object, is_assistant: bool) -> object:
    """A message's content part as listed: a text part (`input_text`, `output_text` or
    `text`, which the chat reading takes alike) as its role's kind, `output_text` with
    `annotations` (`[]` unless it has some) for the assistant, `input_text` for the others;
    any other part as it is."""
    if not isinstance(part, dict) or part.get("type") not in TEXT_PARTS:
        return part
    listed = {**part, "type": "output_text" if is_assistant else "input_text"}
    if is_assistant and listed.get("annotations") is None:
        listed["annotations"] = []
    return listed


def listed_item(raw: dict, default_id: str) -> dict:
    """An input item as OpenAI lists it: with a `type` ("message" when it has none), an `id`
    (its own, else `default_id`; `"id": null` is none), a `status` ("completed" unless it
    has one; a reasoning item's stays optional, as OpenAI's), and a message's content as a
    list of parts (text: one part, `listed_part`), so the list is valid against the SDK's
    item types (an assistant's item is an output message, which needs both). `raw` is an
    item whose fields were checked (`item_fields.check_item_fields`: `input` by
    `to_chat_body`, a conversation's items by `conversation_items`): only the fields its
    type declares, a `status` one of OpenAI's three. A field sent under the Python SDK's
    attribute name (`async_`) is listed under its own (`async`, `item_fields.SDK_NAMES`)."""
    item = {"type": "message", **raw}
    for sdk_name, name in SDK_NAMES.items():
        if sdk_name in item:
            value = item.pop(sdk_name)
            if item.get(name) is None:
                item[name] = value
    if item["type"] == "message":
        content = item.get("content")
        is_assistant = item.get("role") == "assistant"
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if isinstance(parts, list):
            item["content"] = [listed_part(part, is_assistant) for part in parts]
    if item.get("id") is None:   # absent, or a client's explicit null
        item["id"] = default_id
    if item["type"] != "reasoning" and item.get("status") is None:
        item["status"] = "completed"
    return item
