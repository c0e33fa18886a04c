"""HTTP handlers: /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models[/{model}],
/health, /metrics (the Responses API's are in responses_routes.py).

Invariant: each handler authenticates first, then parses, validates and prepares the
request, and only then admits and runs it (`exchange.respond`); every `ApiError` on the way
becomes an OpenAI-shaped JSON response and one count in `stepahead_requests_total`. A
chat or completions request its tenant's limits refuse whatever its token count (its
requests/minute, or its concurrency with a full queue) is refused before it is prepared
(`TenantLimiter.early_refusal`), so a refused flood costs no rendering or tokenizing.
A chat or completions request refused once its body passed `validate` (by any check after
it, early or not) is a failed step of its session (gateway/refused_steps.py), answered
with its `x-request-id` and `x-session-id`; a body that is not valid JSON or not a valid
request is answered untraced.
Metric labels only ever carry configured model and tenant names, never client strings.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from agents_trace.records import StepContext

from gateway.config import UNAUTHENTICATED
from gateway.chat_checks import check_chat_request, check_message_count
from gateway.request_metadata import checked_metadata
from gateway.schema_checks import check_off_loop, tool_parameters
from gateway.choices import with_choices
from gateway.errors import ApiError, server_error
from gateway.exchange import CLIENT_CLOSED_STATUS, admit, did_no_work, record_refusal, session_headers
from gateway.refused_steps import trace_refusal
from gateway.respond import respond
from gateway.embeddings import EmbeddingsRequest, embeddings_refusal, reply_json, upstream_call
from gateway.http_io import ClientGone, race_disconnect, read_json_body
from gateway.engine_series import router_gauges, worker_gauges
from gateway.metrics import Labels
from gateway.metrics_genai import record_refused_request
from gateway.metrics_tenants import listed_limiters, tenant_gauges
from gateway.ids import new_id
from gateway.schemas import ChatCompletionRequest, CompletionRequest, validate
from gateway.service_tiers import request_tier
from gateway.state import GatewayState
from gateway.tracing import tracer_series
from gateway.forecasting import bind_session
from gateway.tracing import begin_step
from gateway.backend import Backend

log = logging.getLogger("stepahead.gateway")


def error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


def refusal(state: GatewayState, error: ApiError, tenant: str, request_id: str | None,
            trace: StepContext | None = None) -> JSONResponse:
    """A generation endpoint's error answer, with `x-request-id` as a reply has it (the
    traced step's id once the request was prepared, else a new one), `x-session-id` when
    the failed step was traced, and, for an authenticated tenant, its rate limits as they
    stand."""
    response = error_response(error)
    response.headers["x-request-id"] = request_id or new_id("req")
    response.headers.update(session_headers(trace))
    if tenant != UNAUTHENTICATED:
        for name, value in state.limiters[tenant].rate_limit_headers().items():
            response.headers.setdefault(name, value)
    return response


def gateway_state(request: Request) -> GatewayState:
    return request.app.state.gateway


def model_label(state: GatewayState, body: object, tenant: str) -> str:
    """The metric label of `tenant`'s request whose JSON `body` was read: the model it
    names when that is a model the tenant may use (so a request refused by its checks
    counts under its model, as one refused later does), else "" (never a client's string:
    label cardinality)."""
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) and state.serves(model, tenant) else ""


def tenant_endpoint(handler: Callable[[Request, GatewayState, str], Awaitable[Response]]
                    ) -> Callable[[Request], Awaitable[Response]]:
    """A handler of the caller's own objects, called with the gateway's state and the
    caller's tenant once its key is authenticated; every `ApiError` it raises (the failed
    authentication's too) is answered OpenAI-shaped. It counts no request metrics."""
    @functools.wraps(handler)
    async def endpoint(request: Request) -> Response:
        state = gateway_state(request)
        try:
            tenant = state.keys.authenticate(request.headers.get("authorization"))
            return await handler(request, state, tenant)
        except ApiError as error:
            return error_response(error)
    return endpoint


def max_reservation(backend: Backend, n: int | None, *, is_chat: bool) -> int | None:
    """At most what a request will reserve of its tenant's tokens once prepared (None:
    not known before it is): a local model's chat request reserves its prompt once and a
    completion budget that fits the context beside it for each of its `n` choices."""
    engine = getattr(backend, "engine", None) if backend.owned_by == "stepahead" else None
    max_context_tokens = getattr(engine, "max_context_tokens", None)
    if not is_chat or not isinstance(max_context_tokens, int):
        return None
    return max_context_tokens * (n or 1)


async def _handle(request: Request, *, is_chat: bool) -> Response:
    started_s = time.perf_counter()
    state = gateway_state(request)
    endpoint = "chat" if is_chat else "completions"
    tenant = UNAUTHENTICATED
    model = ""
    request_id = None
    trace = None
    parsed = None
    try:
        tenant = state.keys.authenticate(request.headers.get("authorization"))
        body = await read_json_body(request, state.config.max_body_bytes)
        model = model_label(state, body, tenant)
        if is_chat:
            check_message_count(body, "messages")
            chat = validate(ChatCompletionRequest, body)
            checked_metadata(chat.metadata)   # out of range: no valid request, untraced (request_metadata)
            parsed = chat
            await check_off_loop(state.schemas, tenant, tool_parameters(parsed),
                                 check_chat_request, parsed, tenant, state.schemas)
        else:
            completion = validate(CompletionRequest, body)
            checked_metadata(completion.metadata)   # as chat's: its session_id names the traced session
            parsed = completion
        backend = state.backend(parsed.model, tenant)
        parsed.service_tier = request_tier(request, tenant, parsed.service_tier, backend)
        model = parsed.model
        refused = state.limiters[tenant].early_refusal(max_reservation(backend, parsed.n, is_chat=is_chat))
        if refused is not None:
            record_refusal(state, tenant, refused)
            raise refused
        if is_chat:
            prepared = await backend.prepare_chat(parsed, tenant, new_id("chatcmpl"))
        else:
            prepared = await backend.prepare_completion(parsed, tenant, new_id("cmpl"))
        prepared = with_choices(prepared, parsed.n)
        request_id = prepared.request_id
        trace = begin_step(state.tracer, request, body, prepared, is_chat=is_chat, started_s=started_s)
        bind_session(prepared, trace)
        return await respond(request, state, backend, prepared, is_chat=is_chat,
                             stream=parsed.stream, include_usage=parsed.wants_stream_usage(),
                             started_s=started_s, trace=trace, is_call=is_chat and parsed.forces_call())
    except ApiError as error:
        state.metrics.record_request(tenant, model, endpoint, error.status)
        record_refused_request(state.metrics, tenant, endpoint, model, time.perf_counter() - started_s, error)
        if parsed is not None and request_id is None:   # a valid request refused before it was prepared
            request_id, trace = trace_refusal(state, request, body, parsed, tenant, error, is_chat=is_chat)
        return refusal(state, error, tenant, request_id, trace)
    except ClientGone:
        return Response(status_code=CLIENT_CLOSED_STATUS)


async def chat_completions(request: Request) -> Response:
    return await _handle(request, is_chat=True)


async def completions(request: Request) -> Response:
    return await _handle(request, is_chat=False)


async def embeddings(request: Request) -> Response:
    """POST /v1/embeddings: upstream models and local embedding models (gateway/embeddings.py),
    admitted by the tenant's limits like any request, for at least the tokens its model will
    count (a local model's inputs are tokenized first: `EmbeddingsCall`); a client that
    leaves cancels the wait. What it is charged counts in `vllm:prompt_tokens_total`
    (nothing when its failure says the upstream did no work: `exchange.did_no_work`). The
    tenant's ticket is released on every path; a failure no check expected (a bug) is
    logged with its traceback, answered as an OpenAI-shaped 500 and counted as one."""
    state = gateway_state(request)
    tenant, model = UNAUTHENTICATED, ""
    request_id = new_id("req")   # the answer's x-request-id, and an upstream failure's log line
    try:
        tenant = state.keys.authenticate(request.headers.get("authorization"))
        body = await read_json_body(request, state.config.max_body_bytes)
        model = model_label(state, body, tenant)
        parsed = validate(EmbeddingsRequest, body)
        backend = state.backend(parsed.model, tenant)
        model = parsed.model
        refused = embeddings_refusal(model, backend)
        if refused is not None:
            raise refused
        prepare = getattr(backend, "prepare_embeddings", None)
        call = await prepare(parsed) if prepare is not None else upstream_call(
            parsed, functools.partial(backend.embed, tenant=tenant, request_id=request_id))

        async def work() -> dict:
            ticket = await admit(state, tenant, call.num_reserved_tokens)
            num_used_tokens = call.num_cancelled_tokens   # the client left: what ran is charged
            try:
                reply = await call.run()
                num_used_tokens = reply["usage"]["total_tokens"]
                return reply
            except Exception as exc:   # nothing when the answer says the upstream did no work (a 429)
                num_used_tokens = 0 if isinstance(exc, ApiError) and did_no_work(exc) else call.num_failed_tokens
                raise
            finally:
                state.limiters[tenant].release(ticket, num_used_tokens)
                state.metrics.record_embedding_tokens(tenant=tenant, model=model, worker=call.worker,
                                                      num_input_tokens=num_used_tokens)
        reply = await race_disconnect(work(), request.receive)
        body = await asyncio.to_thread(reply_json, reply)   # NOTE: up to ~46 MB of JSON: off the event loop
        state.metrics.record_request(tenant, model, "embeddings", 200)
        return Response(body, media_type="application/json",
                        headers={"x-request-id": request_id, **state.limiters[tenant].rate_limit_headers()})
    except ApiError as error:
        state.metrics.record_request(tenant, model, "embeddings", error.status)
        return refusal(state, error, tenant, request_id)
    except ClientGone:
        state.metrics.record_request(tenant, model, "embeddings", CLIENT_CLOSED_STATUS)
        return Response(status_code=CLIENT_CLOSED_STATUS)
    except Exception as exc:
        log.error("unexpected error answering embeddings", exc_info=exc)
        error = server_error()
        state.metrics.record_request(tenant, model, "embeddings", error.status)
        return refusal(state, error, tenant, request_id)


async def health(request: Request) -> Response:
    """Readiness for anyone, with each model's `ready`: 200 "ok", or 503 "starting" (the
    gateway has not finished its start) or "unavailable" (started, but a model has no
    worker ready: all of them restarting, say); an admin key also sees the workers, their
    loads and the device, and the version running; a tenant's key sees only the models it
    may use (its `models`; the status is the gateway's). A key that is sent must be valid."""
    state = gateway_state(request)
    is_admin, tenant = False, None
    authorization = request.headers.get("authorization")
    if authorization:
        try:
            tenant = state.keys.authenticate(authorization)
        except ApiError as error:
            return error_response(error)
        is_admin = state.config.is_admin(tenant)
    models = {name: backend.health() for name, backend in state.backends.items()}
    ready = state.is_ready and all(m.get("ready", True) for m in models.values())
    status = "ok" if ready else "starting" if not state.is_ready else "unavailable"
    body: dict = {"status": status, "models": models}
    if is_admin:
        body["version"] = state.version
    else:
        body["models"] = {name: {"ready": bool(m.get("ready", True))} for name, m in models.items()
                          if tenant is None or state.serves(name, tenant)}
    return JSONResponse(body, status_code=200 if ready else 503)


async def metrics(request: Request) -> Response:
    """Prometheus text for an API key: a tenant's key sees only the series labelled with
    its own tenant; an admin key sees everything, the workers' gauges included. The series
    are copied on the loop and rendered in a thread (`Registry.snapshot`)."""
    state = gateway_state(request)
    try:
        tenant = state.keys.authenticate(request.headers.get("authorization"))
    except ApiError as error:
        return error_response(error)
    is_admin = state.config.is_admin(tenant)
    gauges: dict[tuple[str, Labels], float] = tenant_gauges(listed_limiters(state.limiters, None if is_admin else tenant))
    if state.batches is not None:
        gauges.update(state.batches.tenant_series([name for name, _ in state.limiters.items()] if is_admin
                                                  else [tenant]))
    if is_admin:
        gauges.update(state.gc_pauses.series())
        if state.forecasts is not None:
            gauges.update(state.forecasts.series())
        if state.tracer is not None:
            gauges.update(tracer_series(state.tracer))
        gauges[("stepahead_response_archive_errors_total", ())] = float(state.responses.num_archive_failures)
        for name, backend in state.backends.items():
            gauges.update(worker_gauges(name, backend.worker_metrics()))
            gauges.update(router_gauges(name, backend.router_metrics()))
            gauges.update(router_gauges(name, backend.prompt_token_metrics(), "stepahead_prompt_token_cache_info"))
    # copied here, on the loop; sorted and formatted in a thread (an admin's scrape of
    # hundreds of tenants is ~20k series, which held every other request ~0.3 s: QA174)
    snapshot = state.metrics.snapshot(gauges, tenant=None if is_admin else tenant)
    body = await asyncio.to_thread(lambda: state.metrics.render_snapshot(snapshot).encode())
    return PlainTextResponse(body, media_type="text/plain; version=0.0.4; charset=utf-8")
