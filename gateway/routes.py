"""HTTP handlers: /v1/chat/completions, /v1/completions, /v1/responses[/{id}] (GET, DELETE),
/v1/responses/{id}/input_items, /v1/models[/{model}], /health, /metrics.

Invariant: each handler authenticates first, then parses, validates and prepares the
request, and only then admits and runs it (`exchange.respond`); every `ApiError` on the way
becomes an OpenAI-shaped JSON response and one count in `stepahead_requests_total`.
Metric labels only ever carry configured model and tenant names, never client strings.
"""
from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from gateway.chat_checks import check_chat_request
from gateway.choices import with_choices
from gateway.backend import Backend, Prepared
from gateway.errors import ApiError, response_not_found
from gateway.exchange import ReplyShape, respond
from gateway.http_io import ClientGone, read_json_body
from gateway.list_page import list_page
from gateway.metrics import Labels, router_gauges, worker_gauges
from gateway.openai_format import Collected, new_id
from gateway.response_store import StoredResponse
from gateway.responses_format import (ResponsesRequest, conversation_after, input_items, renamed,
                                      to_chat_body, without_oldest_turn)
from gateway.responses_stream import ResponsesStreamWriter, whole_response
from gateway.schemas import ChatCompletionRequest, CompletionRequest, validate
from gateway.state import GatewayState
from gateway.forecasting import bind_session
from gateway.tracing import begin_step

CLIENT_CLOSED_STATUS = 499


def error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


def _state(request: Request) -> GatewayState:
    return request.app.state.gateway


async def _handle(request: Request, *, is_chat: bool) -> Response:
    started_s = time.perf_counter()
    state = _state(request)
    endpoint = "chat" if is_chat else "completions"
    tenant = "unauthenticated"
    model = ""
    try:
        tenant = state.keys.authenticate(request.headers.get("authorization"))
        body = await read_json_body(request, state.config.max_body_bytes)
        if is_chat:
            parsed = validate(ChatCompletionRequest, body)
            check_chat_request(parsed, tenant, state.schemas)
        else:
            parsed = validate(CompletionRequest, body)
        backend = state.backend(parsed.model)
        model = parsed.model
        if is_chat:
            prepared = await backend.prepare_chat(parsed, tenant, new_id("chatcmpl"))
        else:
            prepared = await backend.prepare_completion(parsed, tenant, new_id("cmpl"))
        prepared = with_choices(prepared, parsed.n)
        trace = begin_step(state.tracer, request, body, prepared, is_chat=is_chat)
        bind_session(prepared, trace)
        return await respond(request, state, backend, prepared, is_chat=is_chat,
                             stream=parsed.stream, include_usage=parsed.wants_stream_usage(),
                             started_s=started_s, trace=trace)
    except ApiError as error:
        state.metrics.record_request(tenant, model, endpoint, error.status)
        return error_response(error)
    except ClientGone:
        return Response(status_code=CLIENT_CLOSED_STATUS)


async def chat_completions(request: Request) -> Response:
    return await _handle(request, is_chat=True)


async def create_response(request: Request) -> Response:
    """POST /v1/responses: the request runs as a chat completion (responses_format.py);
    with `store` (the default) the response is kept for `previous_response_id` and GET."""
    started_s = time.perf_counter()
    state = _state(request)
    tenant, model = "unauthenticated", ""
    try:
        tenant = state.keys.authenticate(request.headers.get("authorization"))
        body = await read_json_body(request, state.config.max_body_bytes)
        parsed = validate(ResponsesRequest, body)
        history: tuple[dict, ...] = ()
        if parsed.previous_response_id is not None:
            previous = await state.responses.get(tenant, parsed.previous_response_id)
            if previous is None:
                raise response_not_found(parsed.previous_response_id, param="previous_response_id",
                                         code="previous_response_not_found", what="Previous response")
            history = previous.messages
        backend = state.backend(parsed.model)  # an unknown model is a 404 before its name is a metric label
        model = parsed.model
        response_id = new_id("resp").replace("-", "_")
        chat_body, prepared = await _prepared_chat(state, backend, parsed, to_chat_body(parsed, history),
                                                   tenant, response_id)
        created_at = int(time.time())

        def store(collected: Collected) -> None:
            if parsed.store:
                state.responses.put(tenant, StoredResponse(whole_response(response_id, parsed, collected, created_at),
                                                           conversation_after(parsed, chat_body, collected),
                                                           input_items(parsed, response_id)))
        shape = ReplyShape("responses", lambda reply, _: whole_response(response_id, parsed, reply.first, created_at),
                           lambda: ResponsesStreamWriter(response_id, parsed, created_at), on_finished=store)
        trace = begin_step(state.tracer, request, chat_body, prepared, is_chat=True)
        bind_session(prepared, trace)
        return await respond(request, state, backend, prepared, is_chat=True, stream=parsed.stream,
                             include_usage=False, started_s=started_s, trace=trace, shape=shape)
    except ApiError as error:
        state.metrics.record_request(tenant, model, "responses", error.status)
        return error_response(error)
    except ClientGone:
        return Response(status_code=CLIENT_CLOSED_STATUS)


async def _prepared_chat(state: GatewayState, backend: Backend, parsed: ResponsesRequest, chat_body: dict,
                         tenant: str, response_id: str) -> tuple[dict, Prepared]:
    """(the chat body, the prepared request) a Responses request runs as on `backend`;
    with `truncation: "auto"` its oldest turns are dropped until the prompt fits the
    model's context. Errors name the Responses API's parameters."""
    while True:
        try:
            chat = validate(ChatCompletionRequest, chat_body)
            check_chat_request(chat, tenant, state.schemas)
            return chat_body, await backend.prepare_chat(chat, tenant, response_id)
        except ApiError as error:
            shorter = (without_oldest_turn(chat_body) if parsed.truncation == "auto"
                       and error.code == "context_length_exceeded" else None)
            if shorter is None:
                raise renamed(error) from None
            chat_body = shorter


async def stored_response(request: Request) -> Response:
    """GET /v1/responses/{id}: a stored response of the caller's own tenant; DELETE
    forgets it. Else (unknown, or another tenant's) a 404."""
    state = _state(request)
    try:
        tenant = state.keys.authenticate(request.headers.get("authorization"))
        response_id = request.path_params["response_id"]
        if request.method == "DELETE":
            found = await state.responses.delete(tenant, response_id)
        else:
            stored = await state.responses.get(tenant, response_id)
            found = stored is not None
        if not found:
            raise response_not_found(response_id)
        if request.method == "DELETE":
            return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})
        return JSONResponse(stored.response)
    except ApiError as error:
        return error_response(error)


async def stored_input_items(request: Request) -> Response:
    """GET /v1/responses/{id}/input_items: the stored response's own input items, as
    a page of an OpenAI list (`limit` 1-100, default 20; `order` "desc", the default, or
    "asc"; `after` an item id)."""
    state = _state(request)
    try:
        tenant = state.keys.authenticate(request.headers.get("authorization"))
        response_id = request.path_params["response_id"]
        page = list_page(request.query_params)
        stored = await state.responses.get(tenant, response_id)
        if stored is None:
            raise response_not_found(response_id)
        return JSONResponse(page.of(stored.input_items))
    except ApiError as error:
        return error_response(error)


async def completions(request: Request) -> Response:
    return await _handle(request, is_chat=False)


def _model_object(state: GatewayState, name: str) -> dict:
    return {"id": name, "object": "model", "created": state.created_s, "owned_by": state.backend(name).owned_by}


async def list_models(request: Request) -> Response:
    state = _state(request)
    try:
        state.keys.authenticate(request.headers.get("authorization"))
    except ApiError as error:
        return error_response(error)
    return JSONResponse({"object": "list", "data": [_model_object(state, name) for name in state.backends]})


async def retrieve_model(request: Request) -> Response:
    """GET /v1/models/{model}: one model object, or a 404 "model_not_found"."""
    state = _state(request)
    try:
        state.keys.authenticate(request.headers.get("authorization"))
        return JSONResponse(_model_object(state, request.path_params["model"]))
    except ApiError as error:
        return error_response(error)


async def health(request: Request) -> Response:
    """Readiness for anyone (200 "ok", or 503 "starting"), with each model's `ready`;
    an admin key also sees the workers, their loads and the device. A key that is sent
    must be valid."""
    state = _state(request)
    is_admin = False
    authorization = request.headers.get("authorization")
    if authorization:
        try:
            is_admin = state.config.is_admin(state.keys.authenticate(authorization))
        except ApiError as error:
            return error_response(error)
    models = {name: backend.health() for name, backend in state.backends.items()}
    ready = state.is_ready and all(m.get("ready", True) for m in models.values())
    if not is_admin:
        models = {name: {"ready": bool(m.get("ready", True))} for name, m in models.items()}
    return JSONResponse({"status": "ok" if ready else "starting", "models": models},
                        status_code=200 if ready else 503)


async def metrics(request: Request) -> Response:
    """Prometheus text for an API key: a tenant's key sees only the series labelled with
    its own tenant; an admin key sees everything, the workers' gauges included."""
    state = _state(request)
    try:
        tenant = state.keys.authenticate(request.headers.get("authorization"))
    except ApiError as error:
        return error_response(error)
    gauges: dict[tuple[str, Labels], float] = {}
    for name, limiter in state.limiters.items():
        gauges[("stepahead_tenant_active_requests", (("tenant", name),))] = limiter.num_active
        gauges[("stepahead_tenant_queued_requests", (("tenant", name),))] = limiter.num_queued
    is_admin = state.config.is_admin(tenant)
    if is_admin:
        for name, backend in state.backends.items():
            gauges.update(worker_gauges(name, backend.worker_metrics()))
            gauges.update(router_gauges(name, backend.router_metrics()))
    return PlainTextResponse(state.metrics.render(gauges, tenant=None if is_admin else tenant),
                             media_type="text/plain; version=0.0.4; charset=utf-8")
