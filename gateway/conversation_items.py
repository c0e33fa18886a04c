"""What the Conversations API keeps: items and metadata, checked and written as OpenAI
lists them.

Invariants:
- an item kept is one a Responses `input` takes (a message, a function call, a function
  call's output, a reasoning item), in its listed form: a `type`, an `id` (the client's,
  else a new one), a message's text as a list of parts, a `status` ("completed" unless
  the client gave one); its chat reading (`input_messages`) cannot fail later; it has only
  the fields OpenAI's type for it declares, with values that type takes (`check_item_fields`:
  a `status` is "in_progress", "completed" or "incomplete"), so it lists as valid;
- a bad item is a 400 naming `items[i]` (or `input[i]`) before any item of its request
  is kept; at most 20 items are added per request, as at OpenAI;
- metadata is checked by gateway.request_metadata.
"""
from __future__ import annotations

from typing import Any

from gateway.errors import ApiError, invalid_request
from gateway.ids import random_hex
from gateway.item_fields import check_item_fields
from gateway.responses_format import ResponsesRequest, check_item_id, input_messages
from gateway.responses_objects import ITEM_ID_PREFIXES, listed_item

MAX_ITEMS_PER_REQUEST = 20
# The string fields each item type needs for its chat reading (a call without its id or
# name would be a prompt no later turn can send).
REQUIRED_TEXT = {"function_call": ("call_id", "name", "arguments"), "function_call_output": ("call_id",)}


def new_conversation_id() -> str:
    return f"conv_{random_hex(48)}"


def new_item_id(kind: str) -> str:
    return f"{ITEM_ID_PREFIXES.get(kind, 'item')}_{random_hex(48)}"


def _checked_item(raw: Any, where: str) -> dict:
    if not isinstance(raw, dict):
        raise invalid_request(f"'{where}' must be an object (an input item).", param=where)
    try:
        input_messages([raw])
    except ApiError as error:
        error.message = error.message.replace("input[0]", where)
        error.param = error.param.replace("input[0]", where, 1) if error.param else where
        raise
    kind = raw.get("type", "message")
    for field in REQUIRED_TEXT.get(kind, ()):
        if not isinstance(raw.get(field), str):
            raise invalid_request(f"A {kind} item needs '{field}' as a string.", param=f"{where}.{field}")
    if kind == "function_call_output" and not isinstance(raw.get("output"), (str, list)):
        raise invalid_request("A function_call_output item needs 'output' as a string or a list of parts.",
                              param=f"{where}.output")
    check_item_id(raw, where)
    check_item_fields(raw, where)
    item = listed_item(raw, new_item_id(kind))
    if kind != "reasoning":
        item.setdefault("status", "completed")
    return item


def checked_items(raw: Any, param: str = "items") -> list[dict]:
    """The items of a create or add request, listed; None is no items (where `items` is
    optional: an add request's is required, `conversations_routes`)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise invalid_request(f"'{param}' must be a list of input items.", param=param)
    if len(raw) > MAX_ITEMS_PER_REQUEST:
        raise invalid_request(f"'{param}' holds {len(raw)} items; at most {MAX_ITEMS_PER_REQUEST} are added "
                              "per request.", param=param, code="invalid_value")
    return [_checked_item(item, f"{param}[{index}]") for index, item in enumerate(raw)]


def turn_items(inputs: tuple[dict, ...], outputs: list[dict]) -> list[dict]:
    """What a finished response adds to its conversation: its input items as listed
    (`responses_objects.input_items`), then its output items, each with a `status`."""
    return [item if item.get("type") == "reasoning" else {"status": "completed", **item}
            for item in (*inputs, *outputs)]


def traced_in_conversation(chat_body: dict, request: ResponsesRequest) -> dict:
    """The chat body of a request in a conversation, traced as the agent session named by
    the conversation's id unless the client names one (`metadata.session_id`; `metadata`
    is the gateway's own, never sent upstream)."""
    conversation_id = request.conversation_id()
    metadata = chat_body.get("metadata") or {}
    if conversation_id is None or "session_id" in metadata:
        return chat_body
    return {**chat_body, "metadata": {**metadata, "session_id": conversation_id}}
