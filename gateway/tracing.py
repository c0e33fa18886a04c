"""Glue between the HTTP layer and `agents_trace`: the tracer, its hooks, the viewer routes.

Invariants: tracing never fails a request: a tracer error at `begin` is logged and the
request runs untraced; `end` only queues a record. The viewer routes authenticate with
the same Bearer keys as the API: a tenant's key sees that tenant's sessions, a key of a
tenant marked `admin = true` sees every tenant's.
"""
from __future__ import annotations

import logging
import sqlite3
import time
from typing import Any

from agents_trace.api import Viewer, build_trace_router
from agents_trace.otel_metrics import build_meter_provider, meter_provider_stop
from agents_trace.records import ChoiceOutput, StepContext, StepResult, ToolCall
from agents_trace.tracer import AgentTracer
from fastapi import APIRouter
from starlette.requests import Request

from gateway.backend import Finished, Prepared, Usage
from gateway.service_tiers import is_batch_request
from cache.damaged_files import is_damaged_database
from gateway.config import GatewayConfig
from gateway.errors import ApiError, unavailable
from gateway.collected import Collected, Reply
from gateway.metrics import Registry
from gateway.metrics_genai import METER_NAME, GenAiInstruments, GenAiRegistry

log = logging.getLogger("stepahead.gateway")
MAX_ERROR_MESSAGE_CHARS = 400   # of a failed step's message (an upstream's, at most 240 and a prefix, fits whole)


def build_tracer(config: GatewayConfig, metrics: Registry | None = None) -> AgentTracer | None:
    """The app's tracer (None with tracing off). With OTLP span export on, the GenAI server
    histograms go over OTLP too: a meter provider whose instruments `metrics` (the app's
    `GenAiRegistry`) records into from now on, shut down at the tracer's stop within its
    final flush deadline (agents_trace/otel_metrics.py)."""
    if not config.tracing.enabled:
        return None
    meter_provider = build_meter_provider(config.tracing)
    if meter_provider is None:
        return AgentTracer(config.tracing)
    try:
        tracer = AgentTracer(config.tracing, span_processors=(meter_provider_stop(meter_provider),))
    except BaseException:
        meter_provider_stop(meter_provider).shutdown()   # its reader's thread; nothing was recorded
        raise
    if isinstance(metrics, GenAiRegistry):
        metrics.genai_otel = GenAiInstruments.of(meter_provider.get_meter(METER_NAME))
    return tracer


def trace_viewer(request: Request) -> Viewer:
    state = request.app.state.gateway
    tenant = state.keys.authenticate(request.headers.get("authorization"))
    return Viewer(tenant=tenant, is_admin=state.config.is_admin(tenant))


def _store_path(request: Request):
    state = request.app.state.gateway
    if state.tracer is not None:
        return state.tracer.store_path
    tracing = state.config.tracing
    return tracing.resolved_store_path() if tracing.store_enabled else None


def _is_tracing(request: Request) -> bool:
    return request.app.state.gateway.tracer is not None


def _forecasters(request: Request):
    return request.app.state.gateway.forecasts


def trace_store_unavailable(request: Request, error: sqlite3.Error) -> ApiError:
    """The answer to a trace query the store could not serve: a 503 saying why. A store
    found damaged is reported to the tracer, which sets it aside and starts a new one."""
    state = request.app.state.gateway
    if is_damaged_database(error) and state.tracer is not None:
        state.tracer.report_store_damage()
    log.warning("stepahead: warning: reading the trace store failed: %s", error)
    return unavailable(f"The trace store could not be read ({error}); try again shortly.",
                       code="trace_store_unavailable")


def tracer_series(tracer: AgentTracer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The trace writer's counts as metric series (gateway.metrics names them), for admins
    only: they mix every tenant's traffic."""
    stats = tracer.stats
    return {("stepahead_trace_steps_total", ()): float(stats.num_steps),
            ("stepahead_trace_dropped_events_total", ()): float(stats.num_dropped),
            ("stepahead_trace_errors_total", (("kind", "store"),)): float(stats.num_store_errors),
            ("stepahead_trace_errors_total", (("kind", "subscriber"),)): float(stats.num_subscriber_errors),
            ("stepahead_trace_errors_total", (("kind", "forecaster"),)): float(stats.num_forecaster_errors),
            ("stepahead_trace_store_dropped_steps_total", ()): float(stats.num_store_dropped_steps),
            ("stepahead_trace_store_busy_total", ()): float(stats.num_store_busy),
            ("stepahead_trace_store_busy_episodes_total", ()): float(stats.num_store_busy_episodes),
            ("stepahead_trace_held_steps", ()): float(stats.num_held_steps),
            ("stepahead_trace_stores_set_aside_total", ()): float(tracer.num_stores_set_aside)}


def trace_router() -> APIRouter:
    return build_trace_router(viewer=trace_viewer, store_path=_store_path, forecasters=_forecasters,
                              tracing=_is_tracing)


def begin_step(tracer: AgentTracer | None, request: Request, body: Any, prepared: Prepared,
               *, is_chat: bool, started_s: float | None = None,
               instructions: str | None = None) -> StepContext | None:
    """The request's step, opened as arriving at `started_s` (`time.perf_counter()` when
    its handler began: where its TTFT counts from), else now; None when it is no agent step.
    `instructions`: a Responses request's, which `body` holds as its first (system) message."""
    if tracer is None or not isinstance(body, dict) or is_batch_request(request):   # not an agent step
        return None
    try:
        asked = body.get("service_tier")
        return tracer.begin(prepared.tenant, request.headers, body,
                            operation="chat" if is_chat else "text_completion",
                            request_id=prepared.request_id,
                            service_tier=prepared.service_tier or (asked if isinstance(asked, str) else None),
                            arrived_ago_s=0.0 if started_s is None else time.perf_counter() - started_s,
                            scheme=request.url.scheme, system_instructions=instructions)
    except Exception:
        log.exception("tracing could not open a step; the request runs untraced")
        return None


def _calls(output: Collected) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(call.id, call.name, call.arguments) for _, call in sorted(output.tool_calls.items()))


def end_step(tracer: AgentTracer, ctx: StepContext, prepared: Prepared,
             finished: Finished | None, reply: Reply | None, ttft_s: float | None,
             error: str | None, error_message: str | None = None,
             cut_usage: Usage | None = None) -> int | None:
    """Close the step with every choice of `reply`: choice 0 in the result's own fields,
    the others (n > 1, several prompts) in `other_choices`. Returns the tracer's count of
    prompt tokens the session's previous prompt began with (None when unknown). A step
    that failed before the model counted its prompt records the gateway's own count, or
    none (0) where that is only an estimate (an upstream model's); one cut short (its
    client left) the tokens its local runs generated until then, the worker and cached
    prompt tokens their first events named (none, 0 cached, before any: the store holds
    no unknown count), and of its reply what `reply` holds (the caller passes
    what the client was sent; so of each other choice, unfinished ones without a finish
    reason). `error_message` is kept to MAX_ERROR_MESSAGE_CHARS. `cut_usage`: the usage of
    a step cut short after its model answered as it was charged and counted (an upstream
    stream's prompt estimate per call and a token a delta: `Exchange.unfinished_usage`),
    else what `prepared` knows (`usage_so_far`)."""
    usage = (finished.usage if finished is not None
             else cut_usage if cut_usage is not None else prepared.usage_so_far())
    output = reply.first if reply is not None else None
    calls = () if output is None else _calls(output)
    others = () if reply is None else tuple(
        ChoiceOutput(choice.finish_reason() if choice.finished is not None else None, _calls(choice),
                     choice.text or None) for choice in reply.choices[1:])
    if finished is None and error is None:
        error = "incomplete"
    if error_message is not None and len(error_message) > MAX_ERROR_MESSAGE_CHARS:
        error_message = error_message[:MAX_ERROR_MESSAGE_CHARS - 1] + "…"
    return tracer.end(ctx, StepResult(
        num_input_tokens=usage.num_prompt_tokens, num_cached_tokens=usage.num_cached_tokens,
        num_output_tokens=usage.num_completion_tokens,
        ttft_s=ttft_s if ttft_s is not None else (finished.ttft_s if finished else None),
        worker=finished.worker if finished else prepared.generated.worker,
        finish_reason=(output.finish_reason() if output is not None and finished else
                       finished.finish_reason if finished else None),
        output_text=output.text if output is not None and output.text else None,
        tool_calls=calls, response_id=prepared.request_id, error=error, error_message=error_message,
        other_choices=others,
        prompt_token_ids=prepared.prompt_token_ids))
