"""The conversation a Responses request continues (`history_before`): the items of the
`conversation` it names, or the messages its `previous_response_id` ended with, or none.

Invariants: a tenant reaches only its own conversations and responses (another's answer
404, naming the request's parameter); only a finished response (`completed` or
`incomplete`) is continued: a background run still going, a stored foreground response
still being answered (`live_responses`), or a response that failed or was cancelled, is a
400 naming `previous_response_id`.
"""
from __future__ import annotations

from gateway.conversation_items import check_kept_items
from gateway.errors import ApiError, invalid_request, response_not_found
from gateway.responses_format import ResponsesRequest
from gateway.responses_input import input_messages
from gateway.state import GatewayState

CONTINUABLE = ("completed", "incomplete")


async def history_before(state: GatewayState, tenant: str, parsed: ResponsesRequest) -> tuple[dict, ...]:
    """The chat messages before this request's input: the conversation it names, or the
    one its `previous_response_id` ended, or none."""
    conversation_id = parsed.conversation_id()
    if conversation_id is not None:
        try:
            items = await state.conversations.call("items", tenant, conversation_id)
        except ApiError as error:
            if error.status == 404:
                error.param = "conversation"
            raise
        try:
            return tuple(input_messages(items))
        except ApiError:
            check_kept_items(items)   # a kept item no turn can read: the 400 names it (QA224 F1)
            raise
    if parsed.previous_response_id is None:
        return ()
    return await _previous_conversation(state, tenant, parsed.previous_response_id)


async def kept_item_named(state: GatewayState, tenant: str, parsed: ResponsesRequest, error: ApiError) -> ApiError:
    """`error`, or, where it blames the `conversation` (one holding an item no turn can read,
    kept before the Conversations API refused such items), the 400 naming that item by its
    id, so it can be deleted (`conversation_items.check_kept_items`, QA224 F1). On this error
    path only: the items are read again, and a turn that reads pays nothing for it."""
    conversation_id = parsed.conversation_id()
    if error.param != "conversation" or conversation_id is None:
        return error
    try:
        check_kept_items(await state.conversations.call("items", tenant, conversation_id))
    except ApiError as named:
        return named
    return error


async def _previous_conversation(state: GatewayState, tenant: str, response_id: str) -> tuple[dict, ...]:
    """The conversation `previous_response_id` continues: a finished response's."""
    run = state.background.get(tenant, response_id)
    running = (run.status if run is not None and not run.is_done
               else "in_progress" if state.live_responses.get(tenant, response_id) is not None   # a foreground one
               else None)
    if running is not None:
        raise invalid_request(f"Previous response '{response_id}' is still {running}; continue it once "
                              "it has completed.", param="previous_response_id", code="invalid_value")
    previous = await state.responses.get(tenant, response_id)
    if previous is None:
        raise response_not_found(response_id, param="previous_response_id",
                                 code="previous_response_not_found", what="Previous response")
    status = previous.response.get("status", "completed")
    if status not in CONTINUABLE:
        raise invalid_request(f"Previous response '{response_id}' is {status}; only a completed or "
                              "incomplete response can be continued.", param="previous_response_id",
                              code="invalid_value")
    return previous.messages
