"""`AgentTracer`: the gateway's hook into agent tracing.

The gateway builds one per app (in its lifespan), calls `begin` when a request has been
checked and `end` on every way it finishes; everything else happens on the trace
writer's thread (writer.py): spans, the SQLite store, subscribers, forecasts.

    tracer = AgentTracer(config); tracer.start()
    ctx = tracer.begin(tenant, request.headers, body, request_id=...)
    ...
    tracer.end(ctx, StepResult(num_input_tokens=..., tool_calls=..., ...))
    tracer.stop()

Invariants: `begin` and `end` do no I/O, never wait (one short lock around in-memory
session bookkeeping) and never raise on odd input (`begin` reads the body defensively);
`end` counts once per context, so calling it again (e.g. from an error path after a
success) is harmless. The tenant always comes from the caller (the authenticated key),
never from the body. Message content is kept only when `capture_content` is on: a chat
request's messages with its tools and tool_choice, a completions request's prompts (the
store keeps 64 Ki characters of a step no model ran: store_rows.REFUSED_CONTENT_MAX_CHARS).
A step's gap (`gap_s`, `prev_ended_s`) runs from the session's last response that ended
before it arrived, whether or not another of its steps is in flight (parallel tool
results sent as separate requests each get one); a step that failed without generating
anything (`generated_nothing`) is no response: it is stored without a gap, and leaves
the session's last response end and pending calls to its retry (sessions.py); the retry
of a step cut part-way, carrying only tool results that step carried, has no gap and
adds no tool run (`Step.repeats_tool_runs`: no tool ran in between). The
client's model name is kept cut to MAX_CLIENT_ID_CHARS, as its other ids are (an unknown
model's name is the client's text), in the store and in spans alike.
"""
from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agents_trace.config import TraceConfig
from agents_trace.content import request_entries
from agents_trace.conversation import MAX_CLIENT_ID_CHARS, after_of, agent_name, assistant_message, \
    explicit_session, extend_digest, is_assistant, prefix_digests
from agents_trace.otel_setup import build_provider
from agents_trace.prompt_blocks import prompt_block_ids
from agents_trace.records import CapturedContent, SessionEnded, Step, StepContext, StepResult
from agents_trace.replay_hints import hinted_after, hinted_calls, replay_hint
from agents_trace.request_attributes import request_params
from agents_trace.sessions import EXPLICIT_SOURCES, OpenedStep, SessionTable
from agents_trace.step_outcome import generated_nothing
from agents_trace.store import TraceStore
from agents_trace.event_queue import EventQueue
from agents_trace.writer import Forecaster, Subscriber, TraceWriter, WriterStats

INSTRUMENTATION_NAME = "stepahead.agents_trace"
CONTROL_TIMEOUT_S = 10.0


def _is_first_step(opened: OpenedStep, messages: list) -> bool:
    """Whether the request starts its session (its `after` is "start"): the table knows no
    response of the session since it went live (its index 0; the retry of a refused first
    step; the first step of a named session resumed after an idle end, an eviction or a
    delete, whose index goes on). A named session may go on from steps stored before
    (a restart, an idle end): one whose request carries an earlier reply (an assistant
    message) continues its conversation, a user turn, not a start."""
    if opened.index != 0 and opened.knows_response:
        return False
    return opened.source not in EXPLICIT_SOURCES or not any(is_assistant(m) for m in messages)


class AgentTracer:
    def __init__(self, config: TraceConfig, *, span_processors: tuple[SpanProcessor, ...] = (),
                 clock: Callable[[], float] = time.time,
                 environ: Mapping[str, str] = os.environ,
                 sweep_interval_s: float = 1.0) -> None:
        self.config = config
        self.clock = clock
        self.stats = WriterStats()
        self.provider = build_provider(config, span_processors, environ)
        self.store_path = config.resolved_store_path(environ) if config.store_enabled else None
        self.captures_content = config.resolved_capture_content(environ)
        self._lock = threading.Lock()
        self._sessions = SessionTable(idle_timeout_s=config.session_idle_timeout_s,
                                      max_sessions=config.max_sessions)
        self._events = EventQueue(config.queue_size, self.stats)
        self._propagator = TraceContextTextMapPropagator()
        store = None if self.store_path is None else TraceStore(   # this process's caches start empty now
            self.store_path, max_age_s=config.retention_max_age_s,
            max_bytes=config.retention_max_bytes, gateway_started_s=clock())
        self._writer = TraceWriter(
            events=self._events, stats=self.stats,
            otel=self.provider.get_tracer(INSTRUMENTATION_NAME), store=store,
            expire=self._expire, clock=clock, idle_timeout_s=config.session_idle_timeout_s,
            retention_interval_s=config.retention_interval_s,
            sweep_interval_s=sweep_interval_s)

    # --- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self._writer.start()

    def stop(self, timeout_s: float = CONTROL_TIMEOUT_S) -> None:
        """End every open session, write everything, flush and shut down exporters."""
        self.end_all_sessions()
        self._writer.stop(timeout_s)
        self.provider.shutdown()

    def flush(self, timeout_s: float = CONTROL_TIMEOUT_S) -> bool:
        """Wait until queued events are written and spans handed to the exporters."""
        is_written = self._writer.flush(timeout_s)
        return self.provider.force_flush(int(timeout_s * 1000)) and is_written

    @property
    def num_stores_set_aside(self) -> int:
        """How many times the store was found damaged and a new one started."""
        store = self._writer.store
        return store.num_set_aside if store is not None else 0

    def report_store_damage(self) -> None:
        """A reader of the store found it damaged: the writer checks it and, when it is,
        sets it aside and starts a new one (at most once a minute; never blocks)."""
        self._writer.report_store_damage()

    def end_all_sessions(self) -> int:
        """End every live session now (spans closed, subscribers told); returns how many."""
        with self._lock:
            ended = self._sessions.end_all("shutdown")
        for event in ended:
            self._events.put_control(event, CONTROL_TIMEOUT_S)
        return len(ended)

    def subscribe(self, subscriber: Subscriber) -> None:
        """Call `subscriber(event)` for every finished Step and SessionEnded, in order.

        NOTE: subscribers run on the trace writer thread; they must be quick and
        thread-safe with respect to whatever else reads their state.
        """
        self._writer.subscribers = (*self._writer.subscribers, subscriber)

    def set_forecaster(self, forecaster: Forecaster | None) -> None:
        """`forecaster(tenant, session, now_s)` is asked, right after each successful step
        (and its subscribers), what the session does next; the next step is checked
        against it."""
        self._writer.forecaster = forecaster

    def add_span_processor(self, processor: SpanProcessor) -> None:
        self.provider.add_span_processor(processor)

    @property
    def num_live_sessions(self) -> int:
        with self._lock:
            return self._sessions.num_live

    def num_steps_in_flight(self) -> int:
        """Steps begun and not yet ended. NOTE: walks every live session: for tests and
        diagnostics, never the request path."""
        with self._lock:
            return self._sessions.num_steps_in_flight()

    def _expire(self, now_s: float) -> list[SessionEnded]:
        with self._lock:
            return self._sessions.expire(now_s)

    # --- the request path ------------------------------------------------------------
    def begin(self, tenant: str, headers: Mapping[str, str], body: Mapping[str, Any], *,
              operation: str = "chat", request_id: str | None = None,
              service_tier: str | None = None, arrived_ago_s: float = 0.0, scheme: str = "http",
              system_instructions: str | None = None) -> StepContext:
        """Resolve the session and open the request's step (served in `service_tier`, when
        known; reached over `scheme`; `system_instructions`: the API's instructions, which
        the body's first message holds as a system message). The step arrived
        `arrived_ago_s` before now (when the gateway began the request: its TTFT counts
        from then, so the step must too; QA137: a TTFT past the step's own duration), never
        before the session's previous response ended (its gap is never negative; its TTFT
        then counts from that end, QA141). Cheap; no I/O."""
        now_s = self.clock()
        raw = body.get("messages")
        messages = raw if isinstance(raw, list) else []
        explicit = explicit_session(headers, body)
        digests = prefix_digests(tenant, messages)
        agent = agent_name(headers, body)   # NOTE: it breaks ties between identical runs' sessions
        with self._lock:
            opened, evicted = self._sessions.open_step(tenant, explicit, digests, messages,
                                                       now_s, agent)
        for event in evicted:
            self._events.offer(event)
        model = body.get("model")
        hint = replay_hint(body)
        began_s = now_s - max(0.0, arrived_ago_s)
        arrived_s = began_s
        after = hinted_after(after_of(messages, _is_first_step(opened, messages), opened.asked), hint, opened.index)
        repeats = after.kind == "tools" and opened.repeats_tool_runs
        if after.kind == "start" or repeats:   # a new conversation, a retry: no gap from a response
            opened = dataclasses.replace(opened, prev_ended_s=None)
        if opened.prev_ended_s is not None:   # (a wall clock that stepped back keeps `now_s`, as before)
            arrived_s = max(arrived_s, min(opened.prev_ended_s, now_s))
        ctx = StepContext(
            tenant=tenant, session=opened.session, index=opened.index,
            session_source=opened.source, operation=operation,
            model=model[:MAX_CLIENT_ID_CHARS] if isinstance(model, str) else "", agent=agent,
            arrived_s=arrived_s,
            after=after,
            gap_s=arrived_s - opened.prev_ended_s if opened.prev_ended_s is not None else None,
            prev_ended_s=opened.prev_ended_s,
            num_messages=len(messages), is_stream=body.get("stream") is True,
            request_id=request_id, conversation_digest=digests[-1] if digests else None,
            num_prefix_messages=opened.num_prefix_messages, prefix_step=opened.prefix_step,
            request_params=request_params(body, headers, scheme),
            replay_tool_calls=hinted_calls(hint.tool_calls, opened.index), service_tier=service_tier,
            arrived_late_s=arrived_s - began_s, repeats_tool_runs=repeats)
        span = trace.get_current_span(self._propagator.extract(headers))
        if span.get_span_context().is_valid:
            ctx.remote_parent = span.get_span_context()
        if self.captures_content:
            ctx.messages = tuple(messages)
            ctx.request_entries = request_entries(body)
            if system_instructions and messages and messages[0] == {"role": "system", "content": system_instructions}:
                ctx.system_instructions = system_instructions
        return ctx

    def end(self, ctx: StepContext, result: StepResult) -> int | None:
        """Close the step and queue it for the writer. Never waits. Returns how many of
        the prompt's tokens the session's previous successful prompt began with (whole
        fingerprint blocks), when both prompts' fingerprints are known: what the prefix
        cache could have kept for this step (compare with its cached tokens); else None.
        A step whose model keeps no prefix cache (`ctx.is_prefix_cached` False) keeps no
        fingerprints: nothing could have been kept for it, so its reuse is unknown (None,
        live and in the store) and nothing of it counts as evicted."""
        if ctx.is_ended:
            return None
        ctx.is_ended = True
        now_s = self.clock()
        if not result.tool_calls and ctx.replay_tool_calls and result.error is None:
            result = dataclasses.replace(result, tool_calls=ctx.replay_tool_calls)
        response_digest, other_digests = None, ()
        is_ok = result.error is None
        if is_ok and ctx.conversation_digest is not None:   # every choice's: the agent may keep any one
            digests = [extend_digest(ctx.conversation_digest, assistant_message(text, calls))
                       for text, calls in result.replies()]
            response_digest, other_digests = digests[0], tuple(digests[1:])
        prompt_blocks = self._prompt_blocks(ctx.tenant, ctx.model, result) if ctx.is_prefix_cached else None
        is_response = not generated_nothing(result)
        with self._lock:
            from_previous = self._from_previous(ctx, prompt_blocks if is_ok else None,
                                                result.num_input_tokens, now_s, is_response)
            self._sessions.close_step(
                ctx.tenant, ctx.session, ctx.index, now_s,
                request_digest=ctx.conversation_digest if is_ok else None,
                num_messages=ctx.num_messages, response_digest=response_digest,
                asked={call.call_id: call.name for _, calls in result.replies() for call in calls},
                other_response_digests=other_digests, is_response=is_response,
                answered=tuple(call.call_id for call in ctx.after.tools))
            ended = None if is_ok else self._sessions.end_if_unreachable(ctx.tenant, ctx.session)
        self._events.offer(Step(
            tenant=ctx.tenant, session=ctx.session, index=ctx.index,
            session_source=ctx.session_source, operation=ctx.operation, model=ctx.model,
            agent=ctx.agent, arrived_s=ctx.arrived_s, ended_s=max(now_s, ctx.arrived_s),
            after=ctx.after, gap_s=ctx.gap_s if is_response else None,
            prev_ended_s=ctx.prev_ended_s if is_response else None,
            num_messages=ctx.num_messages, is_stream=ctx.is_stream,
            num_input_tokens=result.num_input_tokens, num_cached_tokens=result.num_cached_tokens,
            num_output_tokens=result.num_output_tokens,
            ttft_s=None if result.ttft_s is None else max(0.0, result.ttft_s - ctx.arrived_late_s),
            worker=result.worker, finish_reason=result.finish_reason,
            tool_calls=result.tool_calls, request_id=ctx.request_id,
            response_id=result.response_id, error=result.error,
            error_message=result.error_message, remote_parent=ctx.remote_parent,
            content=self._content(ctx, result), request_params=ctx.request_params,
            other_choices=tuple(dataclasses.replace(choice, text=None) for choice in result.other_choices),
            prompt_blocks=prompt_blocks, service_tier=ctx.service_tier, repeats_tool_runs=ctx.repeats_tool_runs))
        if ended is not None:   # after its step: the writer ends what it has opened
            self._events.offer(ended)
        return from_previous

    def _from_previous(self, ctx: StepContext, prompt_blocks: tuple[int, ...] | None, num_prompt_tokens: int,
                       now_s: float, is_response: bool) -> int | None:
        """`end`'s count (under the lock, before the table closes the step): what the prompt
        of the session's latest step to have ended by this one's arrival left it
        (`PreviousPrompt`, as the store's pages and stats count it); then this prompt is
        kept, with its end. None for a step that generated nothing, or whose session is gone.
        A session resumed after a restart keeps no earlier prompt: never an eviction then."""
        state = self._sessions.get(ctx.tenant, ctx.session)
        if state is None or not is_response:
            return None
        previous = state.previous_prompt
        shared = previous.shared_with(prompt_blocks, num_prompt_tokens, prompt_blocks is not None,
                                      index=ctx.index, arrived_s=ctx.arrived_s,
                                      ended_s=max(now_s, ctx.arrived_s))
        if state.num_in_flight <= 1:   # no other step running: later ones all arrive from now on
            previous.forget_before(now_s)
        return shared

    def _prompt_blocks(self, tenant: str, model: str, result: StepResult) -> tuple[int, ...] | None:
        """The prompt's fingerprints, made here so a queued step holds ~50 ints, not the
        prompt's token ids (about 100 us for 3,000 tokens); None when not recorded."""
        if result.prompt_token_ids is None or not self.config.record_prompt_blocks:
            return None
        return tuple(prompt_block_ids(tenant, result.prompt_token_ids, model=model))

    def _content(self, ctx: StepContext, result: StepResult) -> CapturedContent | None:
        if not self.captures_content:
            return None
        # A failed step keeps the part of its reply (any choice) the client was sent (a stream cut midway), if any.
        has_output = result.error is None or any(text is not None or calls for text, calls in result.replies())
        output = assistant_message(result.output_text, result.tool_calls) if has_output else None
        others = () if output is None else tuple(
            assistant_message(choice.text, choice.tool_calls) for choice in result.other_choices)
        return CapturedContent(new_messages=ctx.messages[ctx.num_prefix_messages:] + ctx.request_entries,
                               num_prefix_messages=ctx.num_prefix_messages,
                               prefix_step=ctx.prefix_step, output=output,
                               all_messages=ctx.messages, other_outputs=others,
                               system_instructions=ctx.system_instructions)
