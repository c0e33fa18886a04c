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
        check_kept_items(items)   # one a turn cannot read, kept before the checks that refuse it: named (QA224 F1)
        return tuple(input_messages(items))
    if parsed.previous_response_id is None:
        return ()
    return await _previous_conversation(state, tenant, parsed.previous_response_id)


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
