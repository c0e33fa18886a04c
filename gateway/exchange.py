"""One prepared request in flight: its admission, the events it receives, and its close.

Invariants:
- the tenant's ticket is released exactly once, on every path (finish, error, client gone),
  with the tokens actually used when known (`Exchange.close`, whichever path calls it
  first);
- a request that did not finish (no `Finished`: its client left, or it failed) is charged
  what its token metrics count (`unfinished_usage`, the rule in one place), and counts no
  success: a local run's counts once one started (what its traced step records: the
  tokens its workers generated, those its engine stream held unread included); an
  upstream's prompt estimate for each call it started and a token for each delta it was
  sent (the upstream's own counts never came); nothing when its model did no work: not
  admitted, or failed before its first event with an answer that says so (`did_no_work`:
  a 4xx such as an upstream's 429, a connection never made; the upstream bills nothing,
  and a client's retry would pay again). A local request that failed before any run
  started is charged its prompt, and counts in no worker's metrics;
- a request the gateway's shutdown cut before its reply was whole charges the tenant
  nothing (budget, tokens per minute): its client is told to retry it, and the retry pays
  for the whole reply, the part a stream had sent too; its work still counts as above;
- `x-stepahead-overhead-ms` is wall time in the handler minus time spent waiting on the
  backend (and in the tenant queue), i.e. the gateway's own cost;
- a traced step that failed records what was known when it ended: the tokens it was
  charged once its model answered (`unfinished_usage`: an upstream's estimate too),
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
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from agents_trace.conversation import SESSION_HEADER
from agents_trace.header_ids import encode_header_id
from agents_trace.records import StepContext

from gateway.backend import ChatEvent, Finished, Prepared, RefusalDelta, TextDelta, Usage
from gateway.choices import runs_pay_own_prompt
from gateway.errors import ApiError, says_never_retry, server_error
from gateway.batch_retry import is_sent_again
from gateway.batch_line_turn import BATCH_LINE
from gateway.limits import Ticket
from gateway.metrics_genai import record_server_request
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


# a local engine's 503s for a request it never ran: its queue wait ran out (`max_queue_wait_s`),
# every queue was full, or the engine was stopping (QA101: charged the whole prompt, retried, paid again)
NEVER_RAN_CODES = frozenset({"overloaded", "shutting_down"})


def did_no_work(error: ApiError) -> bool:
    """Whether `error`, ending a request before its model's first event, says the model did
    no work for it, so that it is charged nothing: a refusal (any 4xx: an upstream's 429,
    400 or 413, a local engine's full queue), a local engine's 503 for a request it never
    ran (NEVER_RAN_CODES), a refusal only the operator can cure (the
    upstream rejected the gateway's key, does not know the model, its account ran out, or
    the model has no endpoint: each says `x-should-retry: false`), or a
    connection that was never made (502 `upstream_unavailable`). Any other failure (a
    5xx, a timeout, a stream that broke off) may come after the upstream worked, and is
    charged its prompt estimate."""
    return (error.status < 500 or error.code in NEVER_RAN_CODES or says_never_retry(error)
            or (error.status == 502 and error.code == "upstream_unavailable"))


def keeps_prefix_cache(state: GatewayState, model: str) -> bool:
    """Whether `model` may serve a prompt's prefix from a cache it kept: False only for a
    local engine started with `prefix_caching = false` (its config, in memory: no I/O)."""
    engine = getattr(state.backends.get(model), "engine", None)
    return getattr(getattr(engine, "config", None), "prefix_caching", True) is not False


async def admit(state: GatewayState, tenant: str, num_tokens: int, count_refusal: bool = True) -> Ticket:
    """A ticket from the tenant's limiter; a refusal (429) is raised, and counted by its
    code unless `count_refusal` is False (a caller that tries again counts the last one),
    or it is a Batch API line's (`BATCH_LINE`: the limiter serves it after the tenant's
    interactive requests) that the batch runner sends again (`is_sent_again`): no client
    saw that one, and its tenant's agents were refused nothing."""
    try:
        return await state.limiters[tenant].acquire(num_tokens)
    except ApiError as error:
        if count_refusal:
            record_refusal(state, tenant, error)
        raise


def record_refusal(state: GatewayState, tenant: str, error: ApiError) -> None:
    """Count a limit's refusal in the tenant's `stepahead_rejected_total`, unless it is a
    Batch API line's (`BATCH_LINE`) that the batch runner sends again (`is_sent_again`):
    no client saw that one."""
    if not (BATCH_LINE.get() is not None and is_sent_again(error)):
        state.metrics.record_rejection(tenant, error.code or "")


def take_request(state: GatewayState, tenant: str) -> None:
    """One request of the tenant's `requests_per_minute` for a request that runs no model
    (no concurrency slot, no tokens), or its 429 `ApiError`, counted (`record_refusal`)."""
    try:
        state.limiters[tenant].take_request()
    except ApiError as error:
        record_refusal(state, tenant, error)
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
    output: Reply | None = None  # the reply so far: for a whole reply and the trace
    error: str | None = None
    error_message: str | None = None
    is_streamed: bool = False   # the reply goes out as it is generated: a cut one was sent `output`
    is_cut_at_shutdown: bool = False
    failure_did_no_work: bool = False   # the error it failed with says its model did no work (`did_no_work`)
    on_closed: Callable[[], None] | None = None   # called once, last, when it closes

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
        self.failure_did_no_work = did_no_work(error)

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

    async def acquire(self, count_refusal: bool = True) -> None:
        began_s = time.perf_counter()
        try:
            self.ticket = await admit(self.state, self.prepared.tenant, self.prepared.num_reserved_tokens,
                                      count_refusal)
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
        """Release the ticket and record metrics, then call `on_closed`; only the first
        call counts.

        `status` None leaves the request count to the caller (an `ApiError` on its way
        out is counted where it is rendered).
        """
        if self.is_closed:
            return
        self.is_closed = True
        try:
            self._closed(finished, status)
        finally:
            if self.on_closed is not None:
                self.on_closed()

    def _closed(self, finished: Finished | None, status: int | None) -> None:
        prepared = self.prepared
        unfinished = self.unfinished_usage() if finished is None else None
        if self.ticket is not None:
            used = (finished.usage.num_total_tokens if finished is not None
                    else 0 if self.is_cut_at_shutdown or unfinished is None   # told to retry; or no work done
                    else unfinished[1].num_total_tokens)
            self.state.limiters[prepared.tenant].release(self.ticket, used)
        metrics = self.state.metrics
        ttft_s = (self.first_event_s - self.started_s) if self.first_event_s else None
        error = self.error or (None if status in (None, 200) else "client_closed")   # the traced step's too
        if status is not None:   # None: counted where the error is answered (`record_refused_request`)
            metrics.record_request(prepared.tenant, prepared.model, self.endpoint, status)
            record_server_request(metrics, tenant=prepared.tenant, endpoint=self.endpoint, model=prepared.model,
                                  duration_s=time.perf_counter() - self.started_s, error_type=error, ttft_s=ttft_s,
                                  num_output_tokens=finished.usage.num_completion_tokens if finished else 0)
        if finished is not None:
            usage = finished.usage
            metrics.record_finish(
                tenant=prepared.tenant, model=prepared.model, worker=finished.worker,
                finish_reason=finished.finish_reason,
                num_prompt_tokens=usage.num_prompt_tokens,
                num_cached_tokens=usage.num_cached_tokens,
                num_output_tokens=usage.num_completion_tokens, ttft_s=ttft_s,
                service_tier=prepared.service_tier or "default", runs=finished.worker_runs)
        elif unfinished is not None and unfinished[0] is not None:
            worker, usage = unfinished
            metrics.record_tokens(
                tenant=prepared.tenant, model=prepared.model, worker=worker,
                num_prompt_tokens=usage.num_prompt_tokens, num_cached_tokens=usage.num_cached_tokens,
                num_output_tokens=usage.num_completion_tokens, ttft_s=ttft_s,
                service_tier=prepared.service_tier or "default", runs=prepared.generated.resumed_runs())
        if self.trace is not None:
            message = self.error_message or (self._client_closed_message() if error == "client_closed" else None)
            sent = self.output if finished is not None or self.is_streamed else None
            self.trace.is_prefix_cached = keeps_prefix_cache(self.state, prepared.model)
            answered = unfinished is not None and self.first_event_s is not None   # not "never reached a model"
            from_previous = end_step(self.state.tracer, self.trace, prepared, finished,
                                     sent, ttft_s, error, message, unfinished[1] if answered else None)
            if from_previous is not None and finished is not None and error is None:
                metrics.record_prefix_reuse(prepared.tenant, prepared.model, from_previous,
                                            finished.usage.num_cached_tokens)

    def _num_calls_made(self) -> int:
        """The upstream calls a request that did not finish made, each billed its prompt (an
        estimate here): every choice's (`gateway.choices` starts an upstream model's choices
        at once); a local request's prompt once."""
        return self.prepared.num_choices if runs_pay_own_prompt(self.prepared) else 1

    def unfinished_usage(self) -> tuple[str | None, Usage] | None:
        """What a request that did not finish used, as its tenant is charged (but for a cut
        at shutdown, charged nothing) and its token metrics count it, with the worker they
        name: a local run's counts once one started (its first event named its worker: the
        prompt, the tokens generated until then, read by the reply or not, and those found
        cached, as its traced step records them, `gateway.tracing.end_step`:
        `Prepared.usage_so_far`); None when its model did no work (never
        admitted, or failed before its first event with an error that says so:
        `did_no_work`); an upstream's prompt estimate for each call it started and one
        token for each delta it was sent, on worker "upstream"; a local request no run of
        which started, its prompt on no worker (charged, counted by no worker's metrics)."""
        prepared = self.prepared
        if prepared.generated.worker is not None:
            return prepared.generated.worker, prepared.usage_so_far()
        if self.ticket is None or (self.first_event_s is None and self.failure_did_no_work):
            return None
        usage = Usage(num_prompt_tokens=prepared.num_prompt_tokens * self._num_calls_made(),
                      num_completion_tokens=self.num_deltas, num_cached_tokens=0)
        return (None if prepared.prompt_is_counted else "upstream"), usage

    def _client_closed_message(self) -> str:
        """How far a request had come when its client went away, in words."""
        if self.ticket is None:
            return "The client closed the connection while the request waited for its tenant's turn."
        if self.first_event_s is None:
            return "The client closed the connection before the model's first token."
        num_tokens = self.prepared.generated.num_generated   # local runs only: an upstream's is unknown here
        tokens = f", {num_tokens} output token{'s' if num_tokens != 1 else ''} generated" if num_tokens else ""
        if self.is_streamed:
            return f"The client closed the connection while the reply was streaming{tokens}."
        return f"The client closed the connection before the reply was sent{tokens}."
