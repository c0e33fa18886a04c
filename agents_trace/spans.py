"""Turning Steps into OpenTelemetry spans (GenAI conventions), after the fact.

Per session: one `invoke_agent` span from its first step's start to its last response's
end; a session that ended (idle, evicted, a shutdown) and is resumed under its id opens a
new one, in a new trace. Per step: one `chat {model}` span (arrival to end; the client's
names in span names cut and escaped: `client_span_name`), and, when it
carries tool results and the previous response's end is known, one `execute_tool {name}`
span per result over the gap between them: the tool's run as the gateway saw it
(parallel calls share the gap; results sent as concurrent requests each span from the
same response's end). A step that failed without generating anything
(`generated_nothing`) has none: the tool run is its retry's, so one run is one span.

Invariants: an `invoke_agent` span's `stepahead.session.num_steps` and `gen_ai.usage.*`
count the same steps, its own (one `chat` span each), whatever ended the session before
(the chat spans' `stepahead.step.index` numbers the steps of the whole session); and its
tool spans never start before it: when its first step follows a tool run, the span
starts at the run's start (`tool_run_start_s`), not at the request. NOTE: a resumed
session's span thus starts before its first request, rather than its tool spans being
clipped: the tool did run then (a clipped span would disagree with the chat span's
`gap_s`), and the span before it ended at that same instant (the previous response's
end), so the session's spans abut without overlapping. (Its chat spans, and the tool
spans of concurrent steps, may start before it only when two of its first requests
overlap and the later one ends first: the span starts with the first step the writer is
handed.)

Parents: `invoke_agent` continues the first request's incoming `traceparent` (a child of
the caller's span) or starts a trace; tool spans are children of `invoke_agent`; a chat
span is a child of its own request's `traceparent` when it has one (continuing the
caller's trace, with a link to `invoke_agent`), else of `invoke_agent`. We only ever end
spans we started: a remote parent is wrapped as a non-recording span and never ended.
Times are explicit (Unix ns), so building the spans later, off the request path, loses
nothing. Functions only; the writer owns which spans are open.

Usage (`gen_ai.usage.*`) is tokens used: a step that never reached a model (refused by its
tenant's limits, cut while queued: `reached_model`) exports none, no `gen_ai.response.id`
and no `gen_ai.response.model` (no model made a response), though its record keeps the
refused prompt's size for the store, and adds nothing to its session's totals
(`used_tokens`). `gen_ai.response.time_to_first_chunk` is a streamed step's only (the
conventions define it for streaming); `stepahead.ttft_s` is every step's.

A gateway that dies (SIGKILL, OOM) never ends its sessions' spans; the store keeps each
open one's ids, start and totals (store_rows.py), and the gateway that ends such a
session (`TraceStore.end_abandoned`), or that resumed it meanwhile (a restart's agent
sending its `x-session-id` again: writer_store.py's `SpanBefore`), exports the span it
would have been (`record_left_open_session_span`): the same ids, so its chat and tool
spans find their parent, ended at its last step as an idle end. It goes through the
tracer like any other span; only its ids are given, by an IdGenerator (`_ReusedIds`).
NOTE: the store names one open span per session, the first opened until its writer ends
it or it is handed over: of two gateways serving one session at once, the later's is
lost if it dies before that; and with different idle timeouts on one store, the shortest
may send the span of a session a longer one still holds, which that one sends again,
same ids, when it ends it.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode, \
    TraceFlags

from agents_trace import semconv as sc
from agents_trace.content import input_messages_json, output_messages_json, prompt_messages, \
    span_input_messages, system_instructions_json, tool_call_attributes
from agents_trace.conversation import MAX_CLIENT_ID_CHARS
from agents_trace.records import ForecastCheck, SessionEnded, Step
from agents_trace.step_outcome import generated_nothing
from agents_trace.store_rows import LeftOpenSpan, SessionSpanIds, reached_model
from agents_trace.text_table import printable

NO_TOKENS = (0, 0, 0)
IDLE = "idle"   # the end reason of a session nobody used for the idle timeout


def _ns(t_s: float) -> int:
    return int(t_s * 1e9)


def client_span_name(operation: str, client_text: str | None) -> str:
    """`operation` and the client-chosen text it is about (a model, tool or agent name) as a
    span name: the text cut to MAX_CLIENT_ID_CHARS, then each non-printable character (the
    controls \\x00-\\x1f and \\x7f among them) escaped (`printable`: `\\n`, `\\x1b`), so a
    span name is one bounded line an exporter's log or console prints safely; `operation`
    alone when there is no text."""
    return f"{operation} {printable(client_text[:MAX_CLIENT_ID_CHARS])}" if client_text else operation


def _session_span_name(agent: str | None) -> str:
    return client_span_name(sc.OP_INVOKE_AGENT, agent)


_FIRST_STEP_KEYS = (sc.SERVER_ADDRESS, sc.SERVER_PORT)   # of its request_params, on the session's span


def _session_attributes(tenant: str, session: str, source: str, agent: str | None,
                        first: Step | None = None) -> dict:
    """An `invoke_agent` span's attributes; with the session's `first` step, also its
    model and the server it reached (`gen_ai.request.model`, `server.address`/`server.port`,
    which the conventions ask for at span creation)."""
    attributes = {sc.OPERATION_NAME: sc.OP_INVOKE_AGENT, sc.PROVIDER_NAME: sc.PROVIDER,
                  sc.CONVERSATION_ID: session, sc.TENANT: tenant, sc.SESSION_SOURCE: source}
    if agent:
        attributes[sc.AGENT_NAME] = agent
    if first is not None:
        if first.model:
            attributes[sc.REQUEST_MODEL] = first.model
        attributes.update((name, value) for name, value in first.request_params if name in _FIRST_STEP_KEYS)
    return attributes


def session_span_start_s(step: Step) -> float:
    """When the `invoke_agent` span `step` opens starts: its tool run's start, if earlier."""
    tool_start_s = tool_run_start_s(step)
    return step.arrived_s if tool_start_s is None else min(tool_start_s, step.arrived_s)


def start_session_span(tracer: trace.Tracer, step: Step) -> Span:
    context = None
    if step.remote_parent is not None:
        context = trace.set_span_in_context(NonRecordingSpan(step.remote_parent))
    return tracer.start_span(_session_span_name(step.agent), context=context, kind=SpanKind.INTERNAL,
                             attributes=_session_attributes(step.tenant, step.session, step.session_source,
                                                            step.agent, step),
                             start_time=_ns(session_span_start_s(step)))


def _end_with_totals(span: Span, reason: str, num_steps: int, num_input_tokens: int,
                     num_output_tokens: int, num_cached_tokens: int, end_s: float) -> None:
    span.set_attribute(sc.SESSION_NUM_STEPS, num_steps)
    span.set_attribute(sc.SESSION_END_REASON, reason)
    span.set_attribute(sc.USAGE_INPUT_TOKENS, num_input_tokens)
    span.set_attribute(sc.USAGE_OUTPUT_TOKENS, num_output_tokens)
    span.set_attribute(sc.USAGE_CACHE_READ_INPUT_TOKENS, num_cached_tokens)
    span.end(end_time=_ns(end_s))


def end_session_span(span: Span, ended: SessionEnded, num_steps: int, num_input_tokens: int,
                     num_output_tokens: int, num_cached_tokens: int, now_s: float) -> None:
    """End the span; `num_steps` and the token totals are its own steps' (the writer's
    counts), not `ended.num_steps`, which counts a resumed session's earlier spans' too."""
    end_s = ended.last_ended_s if ended.last_ended_s is not None else now_s
    _end_with_totals(span, ended.reason, num_steps, num_input_tokens, num_output_tokens, num_cached_tokens,
                     end_s)


def session_span_ids(span: Span | None) -> SessionSpanIds | None:
    """The ids the store keeps of a session's span (None when it records nothing)."""
    if span is None or not span.is_recording():
        return None
    context = span.get_span_context()
    parent = getattr(span, "parent", None)   # the SDK span's (ReadableSpan.parent)
    return SessionSpanIds(trace.format_trace_id(context.trace_id), trace.format_span_id(context.span_id),
                          None if parent is None else trace.format_span_id(parent.span_id))


class _ReusedIds(IdGenerator):
    """The ids of a span that was started, never ended, by a gateway since gone (the trace
    id only asked for a span without a parent); `usual` says whether trace ids are random."""

    def __init__(self, usual: IdGenerator, trace_id: int, span_id: int) -> None:
        self.usual = usual
        self.trace_id = trace_id
        self.span_id = span_id

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        return self.span_id

    def is_trace_id_random(self) -> bool:
        return self.usual.is_trace_id_random()


@contextmanager
def _ids_reused(tracer: trace.Tracer, ids: SessionSpanIds) -> Iterator[None]:
    """The next span `tracer` (an SDK Tracer: `id_generator`) starts gets `ids`. NOTE: the
    tracer is the trace writer thread's alone, so no other span starts meanwhile."""
    usual = tracer.id_generator
    tracer.id_generator = _ReusedIds(usual, int(ids.trace_id, 16), int(ids.span_id, 16))
    try:
        yield
    finally:
        tracer.id_generator = usual


def record_left_open_session_span(tracer: trace.Tracer, left: LeftOpenSpan) -> bool:
    """Export the `invoke_agent` span a dead gateway opened and never ended (see the
    module's docstring), as an idle end at the session's last step; False when `tracer`
    has no ids to set (not an SDK tracer: nothing exports)."""
    if not isinstance(getattr(tracer, "id_generator", None), IdGenerator):
        return False
    context = None
    if left.ids.parent_span_id is not None:   # its first request's traceparent (sampled: the span recorded)
        context = trace.set_span_in_context(NonRecordingSpan(SpanContext(
            int(left.ids.trace_id, 16), int(left.ids.parent_span_id, 16), is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED))))
    with _ids_reused(tracer, left.ids):
        span = tracer.start_span(_session_span_name(left.agent), context=context, kind=SpanKind.INTERNAL,
                                 attributes=_session_attributes(left.tenant, left.session, left.source, left.agent),
                                 start_time=_ns(left.started_s))
    _end_with_totals(span, IDLE, left.num_steps, left.num_input_tokens, left.num_output_tokens,
                     left.num_cached_tokens, max(left.last_s, left.started_s))
    return True


def tool_run_start_s(step: Step) -> float | None:
    """When the tool run before the step began (the previous response's end), if it has
    one whose start is known and the step is no refused one (`generated_nothing`: its
    retry carries the run): where its `execute_tool` spans start."""
    if step.after.kind != "tools" or generated_nothing(step):
        return None
    return step.prev_ended_s


def record_tool_spans(tracer: trace.Tracer, session_span: Span, step: Step) -> None:
    """One `execute_tool` span per tool result the step carries (see the module's
    docstring); with captured content (never without) also the call's arguments, result
    and the tool's description (`content.tool_call_attributes`)."""
    start_s = tool_run_start_s(step)
    if start_s is None:
        return
    context = trace.set_span_in_context(session_span)
    for call in step.after.tools:
        span = tracer.start_span(
            client_span_name(sc.OP_EXECUTE_TOOL, call.name), context=context, kind=SpanKind.INTERNAL,
            start_time=_ns(start_s),
            attributes={sc.OPERATION_NAME: sc.OP_EXECUTE_TOOL, sc.TOOL_NAME: call.name,
                        sc.TOOL_CALL_ID: call.call_id, sc.TOOL_TYPE: "function",
                        sc.CONVERSATION_ID: step.session, sc.TENANT: step.tenant,
                        sc.STEP_INDEX: step.index,
                        **(tool_call_attributes(step.content, call) if step.content is not None else {})})
        span.end(end_time=_ns(step.arrived_s))


def used_tokens(step: Step) -> tuple[int, int, int]:
    """The (input, cached input, output) tokens the step used: its counts, or none when it
    never reached a model. What its chat span exports and its session's span sums."""
    if not reached_model(step):
        return NO_TOKENS
    return step.num_input_tokens, step.num_cached_tokens, step.num_output_tokens


def _chat_attributes(step: Step, check: ForecastCheck | None) -> dict:
    attributes = {
        sc.OPERATION_NAME: step.operation, sc.PROVIDER_NAME: sc.PROVIDER,
        sc.REQUEST_MODEL: step.model, sc.CONVERSATION_ID: step.session, sc.TENANT: step.tenant,
        sc.REQUEST_STREAM: step.is_stream,
        sc.SESSION_SOURCE: step.session_source, sc.STEP_INDEX: step.index,
        sc.STEP_AFTER: step.after.label,
        sc.STEP_TOOL_CALLS: [call.name for call in step.tool_calls]}
    is_run = reached_model(step)
    if is_run:   # NOTE: the model the gateway routed to; an upstream's reported name is not in the Step
        attributes.update({sc.RESPONSE_MODEL: step.model, sc.USAGE_INPUT_TOKENS: step.num_input_tokens,
                           sc.USAGE_OUTPUT_TOKENS: step.num_output_tokens,
                           sc.USAGE_CACHE_READ_INPUT_TOKENS: step.num_cached_tokens})
    attributes.update(step.request_params)   # `gen_ai.request.*` and `server.*` (tracer.py)
    optional = {sc.AGENT_NAME: step.agent, sc.RESPONSE_ID: step.response_id if is_run else None,
                sc.WORKER: step.worker, sc.STEP_GAP_S: step.gap_s,
                sc.RESPONSE_TIME_TO_FIRST_CHUNK: step.ttft_s if step.is_stream else None,
                sc.TTFT_S: step.ttft_s,
                sc.ERROR_TYPE: step.error, sc.SERVICE_TIER: step.service_tier}
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
    """Emit the step's chat span (ended at once); returns its span context. CLIENT: the
    gateway calls its model (a worker process or an upstream), as the conventions'
    inference spans are."""
    links = ()
    if step.remote_parent is not None:
        context = trace.set_span_in_context(NonRecordingSpan(step.remote_parent))
        links = (Link(session_span.get_span_context()),)
    else:
        context = trace.set_span_in_context(session_span)
    span = tracer.start_span(client_span_name(step.operation, step.model), context=context,
                             kind=SpanKind.CLIENT, attributes=_chat_attributes(step, check),
                             links=links, start_time=_ns(step.arrived_s))
    if step.content is not None:
        messages = span_input_messages(step.content) or prompt_messages(step.content.new_messages)   # or completions
        if step.content.system_instructions is not None:
            span.set_attribute(sc.SYSTEM_INSTRUCTIONS, system_instructions_json(step.content.system_instructions))
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
