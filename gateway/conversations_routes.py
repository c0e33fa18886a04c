"""HTTP handlers of the Conversations API: POST /v1/conversations; GET, POST (metadata)
and DELETE /v1/conversations/{id}; GET and POST /v1/conversations/{id}/items; GET and
DELETE /v1/conversations/{id}/items/{item_id}. A Responses request names one with
`conversation` (responses_routes.py): its items come before the request's input, and the
input and output are added to it once the response is done.

Invariants: as for every handler, authentication first and errors OpenAI-shaped; a
tenant never reaches another tenant's conversations (their ids answer 404); a body field
these endpoints do not know is a 400 naming it (a misspelt `metadata` is not dropped);
items are added or deleted only between a conversation's turns (`conversation_locks`).
A request that adds items (a create, with items or not; an add) is refused with a 400
`conversation_storage_limit_exceeded` when they would take its tenant's items past `[server]
conversation_bytes_per_tenant` (gateway/conversation_bytes.py), and counts one request of
its tenant's `requests_per_minute` once its body is valid, as `POST
/v1/responses/input_tokens` does: past it a 429 with `Retry-After` and the `x-ratelimit-*`
headers (answered on a success too), nothing kept. It runs no model: it holds no
concurrency slot and spends no tokens, so a `token_budget` (tokens) does not stop it; the
byte cap bounds what a tenant so stopped can keep.
"""
from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.conversation_archive import Conversation
from gateway.conversation_items import checked_items, new_conversation_id
from gateway.request_metadata import checked_metadata
from gateway.errors import ApiError, invalid_request
from gateway.exchange import take_request
from gateway.http_io import fields_of, read_json_body
from gateway.list_page import list_page, listed
from gateway.responses_format import check_include_query
from gateway.routes import tenant_endpoint
from gateway.state import GatewayState


async def adding_items(state: GatewayState, tenant: str, operation: str, *args) -> tuple[object, dict[str, str]]:
    """(`operation`'s answer, the rate limit headers to answer with) for a request that
    adds items: one request of the tenant's `requests_per_minute` taken (or its 429,
    counted in `stepahead_rejected_total`), then the store's call, given the tenant's
    byte cap; an error answered after the request was taken carries the headers too. No
    await before the store call (`held_by`, `check_items_free`)."""
    take_request(state, tenant)
    headers = state.limiters[tenant].rate_limit_headers()
    try:
        return await state.conversations.call(operation, *args, state.config.conversation_bytes_per_tenant), headers
    except ApiError as error:
        error.headers.update(headers)
        raise


@tenant_endpoint
async def create_conversation(request: Request, state: GatewayState, tenant: str) -> Response:
    """POST /v1/conversations: a new conversation, with up to 20 first `items` and its
    `metadata`. Past `[server] conversations_per_tenant` the least recently used one that
    no response runs on leaves; when every one that could is in use, a 429
    (`conversation_store`)."""
    body = fields_of(await read_json_body(request, state.config.max_body_bytes), ("items", "metadata"))
    items = checked_items(body.get("items"))
    conversation = Conversation(new_conversation_id(), int(time.time()), checked_metadata(body.get("metadata")))
    held = state.conversation_locks.held_by(tenant)   # no await before the call: see `held_by`
    _, headers = await adding_items(state, tenant, "create", tenant, conversation, items, held)
    return JSONResponse(conversation.as_object(), headers=headers)


@tenant_endpoint
async def conversation(request: Request, state: GatewayState, tenant: str) -> Response:
    """GET /v1/conversations/{id}; POST sets its `metadata` (replacing it); DELETE forgets
    it and its items."""
    conversation_id = request.path_params["conversation_id"]
    if request.method == "DELETE":
        await state.conversations.call("delete", tenant, conversation_id)
        return JSONResponse({"id": conversation_id, "object": "conversation.deleted", "deleted": True})
    if request.method == "POST":
        body = fields_of(await read_json_body(request, state.config.max_body_bytes), ("metadata",), ("metadata",))
        found = await state.conversations.call("set_metadata", tenant, conversation_id,
                                               checked_metadata(body["metadata"]))
    else:
        found = await state.conversations.call("get", tenant, conversation_id)
    return JSONResponse(found.as_object())


@tenant_endpoint
async def conversation_items(request: Request, state: GatewayState, tenant: str) -> Response:
    """GET /v1/conversations/{id}/items: a page of its items (`limit` 1-100, default 20;
    `order` "desc", the default, or "asc"; `after` an item id, a deleted one's too while
    its cursor is kept: gateway/gone_cursors.py; one never there is a 400). POST adds up to 20
    `items` at its end and lists them as kept; while a response runs on the conversation
    it is a 400 `conversation_locked` (`conversation_locks`), as is DELETE of an item."""
    conversation_id = request.path_params["conversation_id"]
    check_include_query(request.query_params)
    if request.method == "POST":
        body = fields_of(await read_json_body(request, state.config.max_body_bytes), ("items",), ("items",))
        if body["items"] is None:   # required, as at OpenAI: null adds nothing and is no list
            raise invalid_request("Invalid type for 'items': expected an array of input items, but got null.",
                                  param="items", code="invalid_type")
        items = checked_items(body["items"])
        state.conversation_locks.check_items_free(tenant, conversation_id)   # not while a turn runs on it
        kept, headers = await adding_items(state, tenant, "add_items", tenant, conversation_id, items)
        return JSONResponse(listed(kept, has_more=False), headers=headers)
    page = list_page(request.query_params)
    try:
        items, has_more = await state.conversations.call("page", tenant, conversation_id, page)
    except ApiError as error:
        if error.param == "item_id":   # `after` names no item of the conversation
            raise page.unknown_after() from None
        raise
    return JSONResponse(listed(items, has_more))


@tenant_endpoint
async def conversation_item(request: Request, state: GatewayState, tenant: str) -> Response:
    """GET /v1/conversations/{id}/items/{item_id}: the item; DELETE removes it and answers
    the conversation. `item_id` is the rest of the path, decoded: an id may hold "/"."""
    conversation_id, item_id = request.path_params["conversation_id"], request.path_params["item_id"]
    if request.method == "DELETE":
        state.conversation_locks.check_items_free(tenant, conversation_id)   # not while a turn runs on it
        found = await state.conversations.call("delete_item", tenant, conversation_id, item_id)
        return JSONResponse(found.as_object())
    check_include_query(request.query_params)
    return JSONResponse(await state.conversations.call("get_item", tenant, conversation_id, item_id))
