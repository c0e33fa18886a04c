"""One prepared request in flight: its admission, the events it receives, and its close.

Invariants:
- the tenant's ticket is released exactly once, on every path (finish, error, client gone),
  with the tokens actually used when known (`Exchange.close`, whichever path calls it
  first);
- a request cut short (no `Finished`: its client left, or it failed) after the model
  started counts in the token metrics and the time to first token what its traced step
  records (`cut_usage`), and the tenant is charged the same tokens where they are a count
  (local runs); it counts no success. One refused or cut before the model counts none;
- a request the gateway's shutdown cut before its reply was whole charges the tenant
  nothing (budget, tokens per minute): its client is told to retry it, and the retry pays
  for the whole reply, the part a stream had sent too; its work still counts as above;
- `x-stepahead-overhead-ms` is wall time in the handler minus time spent waiting on the
  backend (and in the tenant queue), i.e. the gateway's own cost;
- a traced step that failed records what was known when it ended: the tokens generated,
  the part of its reply the client was sent (a stream's; a whole reply sends nothing), and
  why in words (`error_message`: the message its client was sent, as sent; a client that
  left, at which point);
- a step on a model that keeps no prefix cache (a local engine with `prefix_caching =
  false`: `keeps_prefix_cache`) counts no prefix reuse, live or traced: nothing could have
  been kept for it, so nothing of it was evicted.
How the reply is written, whole or streamed: gateway/respond.py.
"""
from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from agents_trace.conversation import SESSION_HEADER
from agents_trace.header_ids import encode_header_id
from agents_trace.records import StepContext

from gateway.backend import ChatEvent, Finished, Prepared, RefusalDelta, TextDelta, Usage
from gateway.choices import runs_pay_own_prompt
from gateway.errors import ApiError, server_error
from gateway.limits import Ticket
from gateway.collected import Reply
from gateway.state import GatewayState
from gateway.tracing import end_step

OVERHEAD_HEADER = "x-stepahead-overhead-ms"
CLIENT_CLOSED_STATUS = 499  # the request count of a request whose client left (nginx's code)


def session_headers(trace: StepContext | None) -> dict[str, str]:
    """`x-session-id`: the agent session a traced step (answered or failed) belongs to;
    none when it is not traced. A client's id may hold anything: percent-encoded past
    printable ASCII and `%` (header_ids), which a request's `x-session-id` decodes, so the
    header sent back names the same session."""
    return {} if trace is None else {SESSION_HEADER: encode_header_id(trace.session)}


def keeps_prefix_cache(state: GatewayState, model: str) -> bool:
    """Whether `model` may serve a prompt's prefix from a cache it kept: False only for a
    local engine started with `prefix_caching = false` (its config, in memory: no I/O)."""
    engine = getattr(state.backends.get(model), "engine", None)
    return getattr(getattr(engine, "config", None), "prefix_caching", True) is not False


async def admit(state: GatewayState, tenant: str, num_tokens: int) -> Ticket:
    """A ticket from the tenant's limiter; a refusal (429) is counted by its code and raised."""
    try:
        return await state.limiters[tenant].acquire(num_tokens)
    except ApiError as error:
        state.metrics.record_rejection(tenant, error.code or "")
        raise


@dataclass(slots=True)
class Exchange:
    """Bookkeeping for one request in flight."""

    state: GatewayState
    prepared: Prepared
    endpoint: str
    started_s: float
    waited_s: float = 0.0
    first_event_s: float | None = None
    num_deltas: int = 0
    ticket: Ticket | None = None
    is_closed: bool = False
    trace: StepContext | None = None
    output: Reply | None = None  # the reply so far: for a whole reply, the trace and ReplyShape.on_finished
    error: str | None = None
    error_message: str | None = None
    is_streamed: bool = False   # the reply goes out as it is generated: a cut one was sent `output`
    is_cut_at_shutdown: bool = False

    def reply_headers(self, overhead_s: float) -> dict[str, str]:
        """The headers of the reply: the request's id (`x-request-id`, as OpenAI's, and the
        id of its step in the traces), the agent session it was traced under (`x-session-id`:
        the client's, or the one the gateway stitched or opened), the gateway's overhead, and
        the tenant's rate limits as they stand (OpenAI's `x-ratelimit-*`)."""
        headers = {"x-request-id": self.prepared.request_id, OVERHEAD_HEADER: f"{overhead_s * 1000:.3f}",
                   **session_headers(self.trace)}
        headers.update(self.state.limiters[self.prepared.tenant].rate_limit_headers())
        return headers

    def fail(self, error: ApiError) -> None:
        """Record why the request failed, as its client is told: `error`'s code (else its
        type) and message."""
        self.error = error.code or error.type
        self.error_message = error.message

    def cut_at_shutdown(self, error: ApiError) -> None:
        """Record that the gateway's shutdown cut the request, its client told `error`
        (retry it): `close` then charges the tenant nothing unless the reply was whole."""
        self.fail(error)
        self.is_cut_at_shutdown = True

    def restart(self) -> None:
        """Forget what a run that failed had produced, before the reply runs again."""
        if self.output is not None:
            self.output = Reply.of(self.prepared.num_choices, self.prepared.num_prompts)
        self.num_deltas = 0
        self.first_event_s = None
        self.prepared.generated.worker = self.prepared.generated.num_cached_tokens = None   # the new run's

    def overhead_s(self) -> float:
        return max(0.0, time.perf_counter() - self.started_s - self.waited_s)

    async def acquire(self) -> None:
        began_s = time.perf_counter()
        try:
            self.ticket = await admit(self.state, self.prepared.tenant, self.prepared.num_reserved_tokens)
        finally:
            self.waited_s += time.perf_counter() - began_s

    async def next_event(self, events: AsyncIterator[ChatEvent]) -> ChatEvent:
        began_s = time.perf_counter()
        try:
            event = await anext(events)
        except StopAsyncIteration:
            raise server_error("The model stream ended without finishing.") from None
        finally:
            self.waited_s += time.perf_counter() - began_s
        if self.first_event_s is None:
            self.first_event_s = time.perf_counter()
        if isinstance(event, (TextDelta, RefusalDelta)):
            self.num_deltas += 1
        if self.output is not None:
            self.output.add(event)
        return event

    def close(self, finished: Finished | None, status: int | None) -> None:
        """Release the ticket and record metrics; only the first call counts.

        `status` None leaves the request count to the caller (an `ApiError` on its way
        out is counted where it is rendered).
        """
        if self.is_closed:
            return
        self.is_closed = True
        prepared = self.prepared
        cut = self.cut_usage() if finished is None else None
        if self.ticket is not None:
            used = (finished.usage.num_total_tokens if finished is not None
                    else 0 if self.is_cut_at_shutdown   # told to retry: the retry pays
                    else cut[1].num_total_tokens if cut is not None and prepared.generated.worker is not None
                    else prepared.num_prompt_tokens * self._num_calls_made() + self.num_deltas)   # an upstream's
            self.state.limiters[prepared.tenant].release(self.ticket, used)
        metrics = self.state.metrics
        if status is not None:
            metrics.record_request(prepared.tenant, prepared.model, self.endpoint, status)
        ttft_s = (self.first_event_s - self.started_s) if self.first_event_s else None
        if finished is not None:
            usage = finished.usage
            metrics.record_finish(
                tenant=prepared.tenant, model=prepared.model, worker=finished.worker,
                finish_reason=finished.finish_reason,
                num_prompt_tokens=usage.num_prompt_tokens,
                num_cached_tokens=usage.num_cached_tokens,
                num_output_tokens=usage.num_completion_tokens, ttft_s=ttft_s,
                service_tier=prepared.service_tier or "default")
        elif cut is not None:
            worker, usage = cut
            metrics.record_tokens(
                tenant=prepared.tenant, model=prepared.model, worker=worker,
                num_prompt_tokens=usage.num_prompt_tokens, num_cached_tokens=usage.num_cached_tokens,
                num_output_tokens=usage.num_completion_tokens, ttft_s=ttft_s,
                service_tier=prepared.service_tier or "default")
        if self.trace is not None:
            error = self.error or (None if status in (None, 200) else "client_closed")
            message = self.error_message or (self._client_closed_message() if error == "client_closed" else None)
            sent = self.output if finished is not None or self.is_streamed else None
            self.trace.is_prefix_cached = keeps_prefix_cache(self.state, prepared.model)
            from_previous = end_step(self.state.tracer, self.trace, prepared, finished,
                                     sent, ttft_s, error, message)
            if from_previous is not None and finished is not None and error is None:
                metrics.record_prefix_reuse(prepared.tenant, prepared.model, from_previous,
                                            finished.usage.num_cached_tokens)

    def _num_calls_made(self) -> int:
        """The upstream calls a request that did not finish made, each billed its prompt (an
        estimate here): every choice's once its first event came (`gateway.choices` starts
        the others then), else choice 0's alone."""
        return (self.prepared.num_choices if self.first_event_s is not None
                and runs_pay_own_prompt(self.prepared) else 1)

    def cut_usage(self) -> tuple[str, Usage] | None:
        """The worker and usage of a request cut short (no `Finished`) once the model started
        on it (a local run's first event named its worker, or an upstream's first event
        came), as its traced step records them (`gateway.tracing.end_step`): the prompt
        tokens (an upstream's estimate is no count: 0), those its first events found cached,
        the tokens its local runs generated until then (an upstream's are unknown: 0); an
        upstream's worker is "upstream", as its `Finished` names it. None before the model
        started: refused, queued, or cut before any event."""
        generated = self.prepared.generated
        if generated.worker is None and self.first_event_s is None:
            return None
        return generated.worker or "upstream", self.prepared.usage_so_far()

    def _client_closed_message(self) -> str:
        """How far a request had come when its client went away, in words."""
        if self.ticket is None:
            return "The client closed the connection while the request waited for its tenant's turn."
        if self.first_event_s is None:
            return "The client closed the connection before the model's first token."
        num_tokens = self.prepared.generated.num   # local runs only: an upstream's count is unknown here
        tokens = f", {num_tokens} output tokens generated" if num_tokens else ""
        if self.is_streamed:
            return f"The client closed the connection while the reply was streaming{tokens}."
        return f"The client closed the connection before the reply was sent{tokens}."
