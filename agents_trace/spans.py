"""Turning Steps into OpenTelemetry spans (GenAI conventions), after the fact.

Per session: one `invoke_agent` span from its first step's start to its last response's
end; a session that ended (idle, evicted, a shutdown) and is resumed under its id opens a
new one, in a new trace. Per step: one `chat {model}` span (arrival to end), and, when it
carries tool results and the previous response's end is known, one `execute_tool {name}`
span per result over the gap between them: the tool's run as the gateway saw it
(parallel calls share the gap).

Invariants: an `invoke_agent` span's `stepahead.session.num_steps` and `gen_ai.usage.*`
count the same steps, its own (one `chat` span each), whatever ended the session before
(the chat spans' `stepahead.step.index` numbers the steps of the whole session); and its
tool spans never start before it: when its first step follows a tool run, the span
starts at the run's start (`tool_run_start_s`), not at the request. NOTE: a resumed
session's span thus starts before its first request, rather than its tool spans being
clipped: the tool did run then (a clipped span would disagree with the chat span's
`gap_s`), and the span before it ended at that same instant (the previous response's
end), so the session's spans abut without overlapping. (Its chat spans may start before
it only when two of its first requests overlap and the later one ends first: the span
starts with the first step the writer is handed.)

Parents: `invoke_agent` continues the first request's incoming `traceparent` (a child of
the caller's span) or starts a trace; tool spans are children of `invoke_agent`; a chat
span is a child of its own request's `traceparent` when it has one (continuing the
caller's trace, with a link to `invoke_agent`), else of `invoke_agent`. We only ever end
spans we started: a remote parent is wrapped as a non-recording span and never ended.
Times are explicit (Unix ns), so building the spans later, off the request path, loses
nothing. Functions only; the writer owns which spans are open.

Usage (`gen_ai.usage.*`) is tokens used: a step that never reached a model (refused by its
tenant's limits, cut while queued: `reached_model`) exports none and no
`gen_ai.response.id`, though its record keeps the refused prompt's size for the store, and
adds nothing to its session's totals (`used_tokens`).
"""
from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanKind, Status, StatusCode

from agents_trace import semconv as sc
from agents_trace.content import input_messages_json, output_messages_json, prompt_messages
from agents_trace.records import ForecastCheck, SessionEnded, Step

NO_TOKENS = (0, 0, 0)


def _ns(t_s: float) -> int:
    return int(t_s * 1e9)


def start_session_span(tracer: trace.Tracer, step: Step) -> Span:
    context = None
    if step.remote_parent is not None:
        context = trace.set_span_in_context(NonRecordingSpan(step.remote_parent))
    name = f"{sc.OP_INVOKE_AGENT} {step.agent}" if step.agent else sc.OP_INVOKE_AGENT
    attributes = {sc.OPERATION_NAME: sc.OP_INVOKE_AGENT, sc.PROVIDER_NAME: sc.PROVIDER,
                  sc.CONVERSATION_ID: step.session, sc.TENANT: step.tenant,
                  sc.SESSION_SOURCE: step.session_source}
    if step.agent:
        attributes[sc.AGENT_NAME] = step.agent
    tool_start_s = tool_run_start_s(step)
    start_s = step.arrived_s if tool_start_s is None else min(tool_start_s, step.arrived_s)
    return tracer.start_span(name, context=context, kind=SpanKind.INTERNAL,
                             attributes=attributes, start_time=_ns(start_s))


def end_session_span(span: Span, ended: SessionEnded, num_steps: int, num_input_tokens: int,
                     num_output_tokens: int, num_cached_tokens: int, now_s: float) -> None:
    """End the span; `num_steps` and the token totals are its own steps' (the writer's
    counts), not `ended.num_steps`, which counts a resumed session's earlier spans' too."""
    span.set_attribute(sc.SESSION_NUM_STEPS, num_steps)
    span.set_attribute(sc.SESSION_END_REASON, ended.reason)
    span.set_attribute(sc.USAGE_INPUT_TOKENS, num_input_tokens)
    span.set_attribute(sc.USAGE_OUTPUT_TOKENS, num_output_tokens)
    span.set_attribute(sc.USAGE_CACHE_READ_INPUT_TOKENS, num_cached_tokens)
    end_s = ended.last_ended_s if ended.last_ended_s is not None else now_s
    span.end(end_time=_ns(end_s))


def tool_run_start_s(step: Step) -> float | None:
    """When the tool run before the step began (the previous response's end), if it has
    one whose start is known: where its `execute_tool` spans start."""
    return step.prev_ended_s if step.after.kind == "tools" else None


def record_tool_spans(tracer: trace.Tracer, session_span: Span, step: Step) -> None:
    start_s = tool_run_start_s(step)
    if start_s is None:
        return
    context = trace.set_span_in_context(session_span)
    for call in step.after.tools:
        span = tracer.start_span(
            f"{sc.OP_EXECUTE_TOOL} {call.name}", context=context, kind=SpanKind.INTERNAL,
            start_time=_ns(start_s),
            attributes={sc.OPERATION_NAME: sc.OP_EXECUTE_TOOL, sc.TOOL_NAME: call.name,
                        sc.TOOL_CALL_ID: call.call_id, sc.TOOL_TYPE: "function",
                        sc.CONVERSATION_ID: step.session, sc.TENANT: step.tenant,
                        sc.STEP_INDEX: step.index})
        span.end(end_time=_ns(step.arrived_s))


def reached_model(step: Step) -> bool:
    """Whether a model ran the step: it succeeded, or it failed after a model started on it
    (a worker named, a first token, or output tokens). A failed step with none of them
    never reached one (its tenant's limits refused it, its client left while it queued)."""
    return (step.error is None or step.worker is not None or step.ttft_s is not None
            or step.num_output_tokens > 0)


def used_tokens(step: Step) -> tuple[int, int, int]:
    """The (input, cached input, output) tokens the step used: its counts, or none when it
    never reached a model. What its chat span exports and its session's span sums."""
    if not reached_model(step):
        return NO_TOKENS
    return step.num_input_tokens, step.num_cached_tokens, step.num_output_tokens


def _chat_attributes(step: Step, check: ForecastCheck | None) -> dict:
    attributes = {
        sc.OPERATION_NAME: step.operation, sc.PROVIDER_NAME: sc.PROVIDER,
        sc.REQUEST_MODEL: step.model, sc.RESPONSE_MODEL: step.model,
        sc.CONVERSATION_ID: step.session, sc.TENANT: step.tenant,
        sc.REQUEST_STREAM: step.is_stream,
        sc.SESSION_SOURCE: step.session_source, sc.STEP_INDEX: step.index,
        sc.STEP_AFTER: step.after.label,
        sc.STEP_TOOL_CALLS: [call.name for call in step.tool_calls]}
    is_run = reached_model(step)
    if is_run:
        attributes.update({sc.USAGE_INPUT_TOKENS: step.num_input_tokens,
                           sc.USAGE_OUTPUT_TOKENS: step.num_output_tokens,
                           sc.USAGE_CACHE_READ_INPUT_TOKENS: step.num_cached_tokens})
    for key, value in step.request_params:
        attributes[f"gen_ai.request.{key}"] = value
    optional = {sc.AGENT_NAME: step.agent, sc.RESPONSE_ID: step.response_id if is_run else None,
                sc.WORKER: step.worker, sc.STEP_GAP_S: step.gap_s,
                sc.RESPONSE_TIME_TO_FIRST_CHUNK: step.ttft_s, sc.TTFT_S: step.ttft_s,
                sc.ERROR_TYPE: step.error, sc.REQUEST_SERVICE_TIER: step.service_tier}
    attributes.update({k: v for k, v in optional.items() if v is not None})
    if step.finish_reason:
        attributes[sc.RESPONSE_FINISH_REASONS] = [step.finish_reason] + [
            choice.finish_reason or "stop" for choice in step.other_choices]
    if check is not None:
        attributes.update({sc.FORECAST_NEXT_STEP: check.predicted,
                           sc.FORECAST_P_NEXT_STEP: check.p_predicted,
                           sc.FORECAST_P_END: check.p_end,
                           sc.FORECAST_CONFIDENT: check.is_confident,
                           sc.FORECAST_ACTUAL: check.actual, sc.FORECAST_HIT: check.is_hit})
        if check.eta_p50_s is not None:
            attributes[sc.FORECAST_ETA_P50_S] = check.eta_p50_s
    return attributes


def record_chat_span(tracer: trace.Tracer, session_span: Span, step: Step,
                     check: ForecastCheck | None) -> trace.SpanContext:
    """Emit the step's chat span (ended at once); returns its span context."""
    links = ()
    if step.remote_parent is not None:
        context = trace.set_span_in_context(NonRecordingSpan(step.remote_parent))
        links = (Link(session_span.get_span_context()),)
    else:
        context = trace.set_span_in_context(session_span)
    span = tracer.start_span(f"{step.operation} {step.model}", context=context,
                             kind=SpanKind.SERVER, attributes=_chat_attributes(step, check),
                             links=links, start_time=_ns(step.arrived_s))
    if step.content is not None:
        messages = step.content.all_messages or prompt_messages(step.content.new_messages)   # chat, or completions
        if messages:
            span.set_attribute(sc.INPUT_MESSAGES, input_messages_json(messages))
        if step.error is None or step.content.output is not None:   # a failed step: what its client was sent
            span.set_attribute(sc.OUTPUT_MESSAGES, output_messages_json(
                _output_text(step), step.tool_calls, step.finish_reason, step.other_choices,
                step.content.other_outputs))
    if step.error is not None:
        span.set_status(Status(StatusCode.ERROR, step.error_message or step.error))
    span.end(end_time=_ns(step.ended_s))
    return span.get_span_context()


def _output_text(step: Step) -> str | None:
    output = step.content.output if step.content is not None else None
    text = output.get("content") if output is not None else None
    return text if isinstance(text, str) else None
