"""A Responses request's `input` items read as chat messages (`input_messages`), and the
checks of the items themselves: their ids (`check_item_id`, `check_input_ids`), the
content parts and fields each type takes. Shared by the Responses API (responses_format:
`to_chat_body`), the Conversations API's item checks (conversation_items) and a turn's
history (responses_history).

Invariant: an item that reads is one a chat completion can express; anything else is a
400 naming the item (`input[i]...`, or the caller's place for it).
"""
from __future__ import annotations

from typing import Any

from gateway.errors import invalid_request
from gateway.item_fields import check_item_fields
from gateway.responses_errors import OUTPUT_SOURCE

ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text", "text")
# the string field each supported content part carries (an assistant's `refusal` part only)
PART_TEXT_FIELDS = {**dict.fromkeys(TEXT_PARTS, "text"), "input_image": "image_url", "refusal": "refusal"}
MAX_ITEM_ID_CHARS = 256
IMAGE_DETAILS = ("low", "high", "auto", "original")   # an `input_image`'s `detail`, as chat's image part takes it


def _text_of(content: Any, param: str, *, is_assistant: bool = False) -> str | list[dict]:
    """Chat content for a Responses item's content (or a function call's `output`: the
    field `param` ends in is the one its errors name); an assistant's `refusal` parts are
    left out (`_refusal_of` reads them)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid_request(f"'{param.rsplit('.', 1)[-1]}' must be a string or a list of parts.", param=param)
    parts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str) or kind not in PART_TEXT_FIELDS or (kind == "refusal" and not is_assistant):
            raise invalid_request(f"Content part type {kind!r} is not supported.", param=f"{param}[{index}]")
        if kind == "input_image" and part.get("file_id") is not None:
            raise invalid_request("An input_image's 'file_id' is not supported: send the image as 'image_url' "
                                  "(a URL, or the image as a base64 data URL).", param=f"{param}[{index}].file_id",
                                  code="unsupported_parameter")
        field = PART_TEXT_FIELDS[kind]
        if not isinstance(part.get(field), str):
            raise invalid_request(f"A content part of type {kind!r} needs '{field}' as a string.",
                                  param=f"{param}[{index}].{field}")
        if kind in TEXT_PARTS:
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "input_image":
            parts.append({"type": "image_url", "image_url": _image_url(part, f"{param}[{index}]")})
    return parts


def _image_url(part: dict, param: str) -> dict:
    """Chat's `image_url` for an `input_image` part (`param` names it): its URL and its
    `detail` (null is none), one of `IMAGE_DETAILS` (else a 400 naming it)."""
    detail = part.get("detail")
    if detail is None:
        return {"url": part["image_url"]}
    if detail not in IMAGE_DETAILS:
        raise invalid_request(f"Invalid value: {detail!r}. Supported values are: "
                              + ", ".join(repr(v) for v in IMAGE_DETAILS) + ".", param=f"{param}.detail",
                              code="invalid_value")
    return {"url": part["image_url"], "detail": detail}


def _refusal_of(content: Any) -> str | None:
    """The text of an assistant item's `refusal` content parts (as a response's output
    has them), None when it has none."""
    if not isinstance(content, list):
        return None
    refusals = [part["refusal"] for part in content if isinstance(part, dict) and part.get("type") == "refusal"
                and isinstance(part.get("refusal"), str)]
    return "".join(refusals) if refusals else None


def check_item_id(item: dict, where: str) -> None:
    """A 400 naming `where.id` when the item's `id` is not a string of 1 to 256
    characters, or is one its URL cannot name (a `.` or `..` between slashes, which
    clients and the router take for a path's dot-segment: QA229); an item without one (or
    with `"id": null`) is given one when listed."""
    own_id = item.get("id")
    if own_id is not None and not (isinstance(own_id, str) and 0 < len(own_id) <= MAX_ITEM_ID_CHARS):
        raise invalid_request(f"An item's 'id' must be a string of 1 to {MAX_ITEM_ID_CHARS} characters.",
                              param=f"{where}.id", code="invalid_value")
    if own_id is not None and any(segment in (".", "..") for segment in own_id.split("/")):
        raise invalid_request(f"An item's 'id' may not be '.' or '..', nor hold one between slashes ({own_id!r}): "
                              "its URL could not name it.", param=f"{where}.id", code="invalid_value")


def check_input_ids(items: str | list[dict[str, Any]]) -> None:
    """A 400 for an `input` item whose id is malformed (`check_item_id`) or repeats an
    earlier item's (every listed input item has its own id), or with a field its type does
    not take (`check_item_fields`)."""
    if isinstance(items, str):
        return
    seen: set[str] = set()
    for index, item in enumerate(items):
        check_item_id(item, f"input[{index}]")
        check_item_fields(item, f"input[{index}]")
        own_id = item.get("id")
        if own_id in seen:
            raise invalid_request(f"Duplicate item found with id '{own_id}'.", param=f"input[{index}].id",
                                  code="invalid_value")
        if own_id is not None:
            seen.add(own_id)


def input_messages(items: str | list[dict[str, Any]], sources: list[tuple[str, ...]] | None = None) -> list[dict]:
    """Chat messages for `input`: consecutive function calls become one assistant
    message with several tool calls; reasoning items are dropped. `sources`, when given,
    gets per message the items it came from as the request names them (`("input[i]",)`;
    a merged assistant message's: one per call, in order; a function_call_output's:
    `("input[i]", OUTPUT_SOURCE)`, its message's content being the item's `output`)."""
    whole = isinstance(items, str)
    if whole:
        items = [{"role": "user", "content": items}]
    messages: list[dict] = []
    for index, item in enumerate(items):
        param = "input" if whole else f"input[{index}]"
        num_before = len(messages)
        kind = item.get("type", "message")
        if kind == "message":
            if item.get("role") not in ROLES:
                raise invalid_request(f"A message's role must be one of {', '.join(ROLES)}.", param=f"{param}.role")
            is_assistant = item["role"] == "assistant"
            message = {"role": item["role"],
                       "content": _text_of(item.get("content"), f"{param}.content", is_assistant=is_assistant)}
            refusal = _refusal_of(item.get("content")) if is_assistant else None
            if refusal is not None:   # a refusal sent back: chat's `refusal`, its content the text or ""
                message["refusal"] = refusal
                message["content"] = message["content"] or ""
            messages.append(message)
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments", "")}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and last.get("tool_calls") and not last["content"]:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": output if isinstance(output, str) else _text_of(output, f"{param}.output")})
        elif kind != "reasoning":
            raise invalid_request(f"Input item type {kind!r} is not supported.", param=param)
        if sources is not None and len(messages) > num_before:
            sources.append((param, OUTPUT_SOURCE) if kind == "function_call_output" else (param,))
        elif sources is not None and kind == "function_call":   # one more call of the message before
            sources[-1] += (param,)
    return messages
