"""A Responses API reply rendered as OpenAI's objects: the response object, its output
items (one `message` for the text, one `function_call` per call), and the request's
`input` as `GET /v1/responses/{id}/input_items` lists it. The request side (a Responses
request as a chat request): gateway/responses_format.py.

Invariants: a message item's text part is there once the item is done (`completed` or
`incomplete`), never while `in_progress`; its `logprobs` is always a list (empty unless
asked); a model's refusal is a `refusal` content part after the text (the only part when
there is no text), as OpenAI sends it; the last item of a reply that ran out of tokens is `incomplete`, the others
`completed`; every listed input item has a `type` and an `id`; a response's own input
item ids (`<prefix>_<suffix>_<position>`) and output item ids (`output_item_id`) never
share a shape, so none of its output items has the id of one of its input items.
"""
from __future__ import annotations

import time
from typing import Literal

from gateway.backend import TokenChoice, Usage
from gateway.collected import Collected
from gateway.openai_format import logprob_entries
from gateway.responses_format import ResponsesRequest
from gateway.schemas import served_tier


def final_status(collected: Collected) -> str:
    """`incomplete` when the reply ran out of tokens, else `completed`."""
    return "incomplete" if collected.finish_reason() == "length" else "completed"


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
    """The reply as Responses output items: its text as one message, then its calls; a
    reply with neither is one empty message (a turn the conversation keeps, as a stream
    announces it). When the reply ran out of tokens, the last item (the one it was
    writing) is `incomplete`, as OpenAI marks it; the others are `completed`. Ids:
    `output_item_id`."""
    items: list[dict] = []
    if collected.text or collected.refusal is not None or not collected.tool_calls:
        items.append(message_item(output_item_id(response_id, "message"), collected.text or "", "completed",
                                  collected.logprobs, collected.refusal))
    for index, call in sorted(collected.tool_calls.items()):
        items.append(call_item(output_item_id(response_id, "call", index), call.id, call.name, call.arguments,
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
    `incomplete` when the reply ran out of tokens in it), not while `in_progress`: the
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


def response_object(response_id: str, request: ResponsesRequest, *, created_at: int | None = None,
                    status: ResponseStatus = "completed", output: list[dict] | None = None,
                    usage: Usage | None = None, error: dict | None = None,
                    service_tier: str | None = None) -> dict:
    """A response object; `incomplete` when the reply ran out of `max_output_tokens`;
    `error` ({"code", "message"}) only when it `failed`; `completed_at` only when it
    `completed` (now: the object is made as it ends); `service_tier` the one an upstream
    said it served the reply in, else the one the gateway serves it in."""
    return {
        "id": response_id, "object": "response", "created_at": created_at or int(time.time()),
        "status": status, "completed_at": int(time.time()) if status == "completed" else None, "background": request.background, "model": request.model, "output": output or [],
        "error": error, "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": request.instructions, "max_output_tokens": request.max_output_tokens,
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "previous_response_id": request.previous_response_id, "store": request.store,
        "conversation": {"id": request.conversation_id()} if request.conversation is not None else None,
        "temperature": request.temperature, "top_p": request.top_p, "tool_choice": request.tool_choice or "auto",
        "tools": request.tools or [], "text": request.text or {"format": {"type": "text"}},
        "metadata": request.metadata or {}, "user": request.user,
        "truncation": request.truncation or "disabled", "top_logprobs": request.top_logprobs,
        "service_tier": service_tier or served_tier(request.service_tier),
        "prompt_cache_key": request.prompt_cache_key,
        "safety_identifier": request.safety_identifier, "max_tool_calls": request.max_tool_calls,
        "usage": None if usage is None else {
            "input_tokens": usage.num_prompt_tokens,
            "input_tokens_details": {"cached_tokens": usage.num_cached_tokens},
            "output_tokens": usage.num_completion_tokens,
            "output_tokens_details": {"reasoning_tokens": usage.num_reasoning_tokens},
            "total_tokens": usage.num_total_tokens}}


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


def listed_item(raw: dict, default_id: str) -> dict:
    """An input item as OpenAI lists it: with a `type` ("message" when it has none), an `id`
    (its own, else `default_id`; `"id": null` is none), and a message's text content as a list of parts
    (`input_text`, or `output_text` for the assistant)."""
    item = {"type": "message", **raw}
    if item["type"] == "message" and isinstance(item.get("content"), str):
        part = "output_text" if item.get("role") == "assistant" else "input_text"
        item["content"] = [{"type": part, "text": item["content"]}]
    if item.get("id") is None:   # absent, or a client's explicit null
        item["id"] = default_id
    return item
