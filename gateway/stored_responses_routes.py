"""HTTP handlers of the Responses API over stored responses: GET / DELETE
/v1/responses/{id}, POST /v1/responses/{id}/cancel, GET /v1/responses/{id}/input_items
(responses_routes.py makes them). A stored foreground response still running
(`live_responses`) is found too: GET answers it `in_progress` with its output so far (as
OpenAI shows a stored response in flight), DELETE marks it deleted (its end is not
stored), input_items lists its input; it cannot be cancelled (not a background one).

Invariants: as for every handler, authentication first and errors OpenAI-shaped; a
tenant never reaches another tenant's responses or runs (their ids answer 404).
"""
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.background_stream import run_event_stream
from gateway.errors import invalid_request, response_not_found
from gateway.list_page import list_page
from gateway.live_responses import LiveResponse
from gateway.response_store import is_unfinished
from gateway.responses_format import check_include_query
from gateway.routes import tenant_endpoint
from gateway.state import GatewayState


def _stream_query(request: Request) -> tuple[bool, int]:
    """(`stream`, `starting_after`) of a GET; `starting_after` -1 when absent."""
    query = request.query_params
    stream = query.get("stream", "false").lower()
    if stream not in ("true", "false"):
        raise invalid_request("`stream` must be true or false.", param="stream", code="invalid_value")
    raw = query.get("starting_after")
    if raw is None:
        return stream == "true", -1
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise invalid_request("`starting_after` must be a sequence number (an integer, 0 or more).",
                              param="starting_after", code="invalid_value")
    return stream == "true", int(raw)


@tenant_endpoint
async def stored_response(request: Request, state: GatewayState, tenant: str) -> Response:
    """GET /v1/responses/{id}: the caller's own response, a background one as it stands
    (`?stream=true&starting_after=N`: its events after N, then live ones until it ends;
    `include` values checked as the request's); DELETE forgets it, stopping it first if
    it still runs. Else (unknown, another tenant's, or deleted through another gateway
    sharing the responses' file) a 404: a GET never stops a run (one deleted elsewhere
    finishes here and is not stored again, `response_store`). A stored foreground response
    still running is answered `in_progress` as it stands; DELETE forgets it, and its end is
    not stored (QA224 F5)."""
    response_id = request.path_params["response_id"]
    run = state.background.get(tenant, response_id)
    if request.method == "DELETE":
        if state.live_responses.delete(tenant, response_id):
            return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})
        if run is not None:
            await state.background.forget(run)
        if not await state.responses.delete(tenant, response_id):
            raise response_not_found(response_id)
        return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})
    stream, starting_after = _stream_query(request)
    check_include_query(request.query_params)
    live = state.live_responses.get(tenant, response_id)
    if live is not None:   # a foreground one still running
        return _live_response(live, stream)
    stored = await state.responses.get(tenant, response_id)
    if stored is None:
        raise response_not_found(response_id)
    if stream and run is not None:
        return run_event_stream(run, starting_after)
    if run is not None and not run.is_done:
        return JSONResponse(run.response())
    if stream:
        kept = ("it runs in another gateway sharing this one's responses file: stream it there, or GET it "
                "without `stream` for where it stands" if is_unfinished(stored.response) and stored.response.get(
                    "background")   # (QA133: this read "no longer kept ... the final response")
                else "its events are no longer kept (the last 64 finished per tenant, not across a restart); "
                "GET it without `stream` for the final response" if stored.response.get("background")
                else "only a background response's events can be streamed")
        raise invalid_request(f"Response '{response_id}' cannot be streamed: {kept}.", param="stream",
                              code="invalid_value")
    return JSONResponse(stored.response)


def _live_response(live: LiveResponse, stream: bool) -> Response:
    """A stored foreground response still running, as it stands (`in_progress`); its
    events cannot be streamed again (only a background response's can)."""
    if stream:
        raise invalid_request(f"Response '{live.response_id}' cannot be streamed: only a background response's events "
                              "can be streamed.", param="stream", code="invalid_value")
    return JSONResponse(live.response())


@tenant_endpoint
async def cancel_response(request: Request, state: GatewayState, tenant: str) -> Response:
    """POST /v1/responses/{id}/cancel: stops a background response that is queued or in
    progress and answers it `cancelled`; cancelling a cancelled one again answers the
    same. Any other response is a 400 (not a background one, or already finished)."""
    response_id = request.path_params["response_id"]
    run = state.background.get(tenant, response_id)
    if run is not None:
        await state.background.cancel(run)
    stored = None   # a foreground response still running: not one to cancel
    if state.live_responses.get(tenant, response_id) is None:
        stored = await state.responses.get(tenant, response_id)
        if stored is None:
            raise response_not_found(response_id)
    if stored is None or not stored.response.get("background"):
        raise invalid_request("Only responses created with `background: true` can be cancelled.",
                              param="response_id", code="invalid_value")
    if run is None and is_unfinished(stored.response):
        raise invalid_request(f"Response '{response_id}' runs in another gateway sharing this one's responses file; "
                              "cancel it there.", param="response_id", code="invalid_value")
    status = stored.response.get("status")
    if status != "cancelled":
        raise invalid_request(f"Response '{response_id}' cannot be cancelled: its status is already '{status}'.",
                              param="response_id", code="invalid_value")
    return JSONResponse(stored.response)


@tenant_endpoint
async def stored_input_items(request: Request, state: GatewayState, tenant: str) -> Response:
    """GET /v1/responses/{id}/input_items: the stored response's own input items, as
    a page of an OpenAI list (`limit` 1-100, default 20; `order` "desc", the default, or
    "asc"; `after` an item id)."""
    response_id = request.path_params["response_id"]
    page = list_page(request.query_params)
    check_include_query(request.query_params)
    run = state.background.get(tenant, response_id)
    if run is not None and not run.is_done:
        return JSONResponse(page.of(run.input_items))
    live = state.live_responses.get(tenant, response_id)
    if live is not None:   # a foreground one still running
        return JSONResponse(page.of(live.input_items))
    stored = await state.responses.get(tenant, response_id)
    if stored is None:
        raise response_not_found(response_id)
    return JSONResponse(page.of(stored.input_items))
