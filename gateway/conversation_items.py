"""What the Conversations API keeps: items and metadata, checked and written as OpenAI
lists them.

Invariants:
- an item kept is one a Responses `input` takes (a message, a function call, a function
  call's output, a reasoning item), in its listed form: a `type`, an `id` (the client's,
  else a new one), a message's text as a list of parts, a `status` ("completed" unless
  the client gave one); its chat reading (`input_messages`) is one a turn takes: it passes
  the turn's own checks of each message (chat's `Message` schema, through
  `ChatCompletionRequest`: no empty `content` or `output` list, a function_call_output's
  non-empty `call_id`), and a call's `call_id` is a non-empty string, so no item kept makes
  every later turn a 400 (QA224 F1); it has only the fields OpenAI's type for it declares,
  with values that type takes (`check_item_fields`: a `status` is "in_progress",
  "completed" or "incomplete"), so it lists as valid;
- a bad item is a 400 naming `items[i]` (or `input[i]`), as the same item in a Responses
  `input` is named, before any item of its request is kept; at most 20 items are added
  per request, as at OpenAI;
- `check_kept_items` refuses only what a turn refuses anyway (the same checks), naming
  the item kept before these checks by its id, so that it can be found and deleted;
- metadata is checked by gateway.request_metadata.
"""
from __future__ import annotations

from typing import Any

from gateway.errors import ApiError, invalid_request
from gateway.ids import random_hex
from gateway.item_fields import check_item_fields
from gateway.responses_errors import renamed
from gateway.responses_format import ResponsesRequest
from gateway.responses_input import check_item_id, input_messages
from gateway.responses_objects import ITEM_ID_PREFIXES, listed_item
from gateway.schemas import ChatCompletionRequest, validate

MAX_ITEMS_PER_REQUEST = 20
# The string fields each item type needs for its chat reading (a call without its id or
# name would be a prompt no later turn can send).
REQUIRED_TEXT = {"function_call": ("call_id", "name", "arguments"), "function_call_output": ("call_id",)}
# Of those, the ones that may not be empty either: no output can answer a call whose id is ""
NON_EMPTY_TEXT = ("call_id",)
READING_MODEL = "-"   # the model of the chat request an item's reading is checked as: not read


def new_conversation_id() -> str:
    return f"conv_{random_hex(48)}"


def new_item_id(kind: str) -> str:
    return f"{ITEM_ID_PREFIXES.get(kind, 'item')}_{random_hex(48)}"


def _named(error: ApiError, where: str) -> ApiError:
    """`error`, about the one item of a request's `input[0]`, naming `where` instead."""
    error.message = error.message.replace("input[0]", where)
    error.param = error.param.replace("input[0]", where, 1) if error.param else where
    return error


def _check_reading(raw: dict, where: str) -> None:
    """A 400 naming `where` (or its field) for an item a turn cannot read: one whose chat
    reading fails, or fails the turn's checks of each chat message (the turn's own code:
    `input_messages`, then `ChatCompletionRequest`'s validation, its error named as a
    Responses request's by `responses_errors.renamed`); a call's string fields checked
    first, with messages of their own. Pairing calls with outputs is left to the turn:
    items are checked one by one, as at OpenAI."""
    kind = raw.get("type", "message")
    sources: list[tuple[str, ...]] = []
    try:
        messages = input_messages([raw], sources)
    except ApiError as error:
        raise _named(error, where) from None
    for field in REQUIRED_TEXT.get(kind, ()):
        if not isinstance(raw.get(field), str):
            raise invalid_request(f"A {kind} item needs '{field}' as a string.", param=f"{where}.{field}")
        if field in NON_EMPTY_TEXT and not raw[field]:
            raise invalid_request(f"Invalid '{where}.{field}': empty string. Expected a string with minimum length 1, "
                                  "but got an empty string instead.", param=f"{where}.{field}", code="empty_string")
    if kind == "function_call_output" and not isinstance(raw.get("output"), (str, list)):
        raise invalid_request("A function_call_output item needs 'output' as a string or a list of parts.",
                              param=f"{where}.output")
    if not messages:   # a reasoning item: no chat message
        return
    try:
        validate(ChatCompletionRequest, {"model": READING_MODEL, "messages": messages})
    except ApiError as error:
        raise _named(renamed(error, sources), where) from None


def _checked_item(raw: Any, where: str) -> dict:
    if not isinstance(raw, dict):
        raise invalid_request(f"'{where}' must be an object (an input item).", param=where)
    _check_reading(raw, where)
    kind = raw.get("type", "message")
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


def check_kept_items(items: list[dict], param: str = "conversation") -> None:
    """A 400 naming `param` and the item's id for a kept item a turn cannot read
    (`_check_reading`): one kept before the Conversations API refused such items, which
    would otherwise make every turn a 400 that names only the conversation. About 6 us an
    item: run only once a turn failed over its conversation (`responses_history`)."""
    for item in items:
        try:
            _check_reading(item, "item")
        except ApiError as error:
            error.message = (f"Invalid '{param}': its item '{item.get('id')}' cannot be part of a turn "
                             f"({error.message.rstrip('.')}). Delete the item, or the conversation, to go on.")
            error.param = param
            raise


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
