"""Answering one prepared request over HTTP: the backend's events as a whole reply or
as a stream of server-sent events (the request's bookkeeping: gateway/exchange.py).

Invariants:
- nothing is sent before the first event (or error) arrives, so failures before the first
  token are ordinary HTTP errors; after that, an error becomes one SSE error event and the
  stream closes;
- a client that leaves (while queued, before the first token, mid-stream, or while a
  non-streamed reply is being generated) cancels the backend work;
- a reply none of which has been sent (answered whole, or a stream before its first
  event) runs again from the start, once, when its worker died under it (`worker_died`:
  the engine itself re-queues requests that had no token yet, and resumes those that had);
  a stream that has begun cannot be taken back, and ends with the error;
- a stream, whose header always says 200, is counted in `stepahead_requests_total` by how
  it ended (`stream_status`): an error event counts the error's status, as a failure
  before the first event would have been answered; a failed stream counts no success.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import NoReturn, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from agents_trace.records import StepContext

from gateway.batch_line_turn import BATCH_LINE
from gateway.backend import Backend, ChatEvent, Finished, Prepared, Usage
from gateway.choices import merged_usage, run_choices
from gateway.errors import CUT_REPLY_HEADERS, ApiError, request_cut_at_shutdown, server_error, stream_cut_at_shutdown
from gateway.engine_streams import ModelQueueFull
from gateway.exchange import CLIENT_CLOSED_STATUS, Exchange
from gateway.http_io import ClientGone, EventStreamResponse, race_disconnect
from gateway.collected import Reply
from gateway.openai_format import ChunkWriter, ResponseHeader, chat_completion, dumps, text_completion
from gateway.state import GatewayState

UNSENT_REPLY_ATTEMPTS = 2   # runs of a reply not begun yet, when its worker dies under it
T = TypeVar("T")
log = logging.getLogger("stepahead.gateway")


def _raise_failed(exchange: Exchange, exc: BaseException) -> NoReturn:
    """Close `exchange`, whose reply failed with `exc` before a byte was sent, and raise:
    `exc` itself (an `ApiError`, counted where it is answered; the client gone, or a batch
    line its cancelled batch gave up, counted as a client that left; the server's shutdown
    cancelling it, counted as the 503 the app answers it with), or,
    for anything else (a bug, an upstream's answer no check caught), a 500 `ApiError`,
    logged here with its traceback, so the answer is OpenAI-shaped, carries the request's
    id and counts as a 500, never as a client that left. Every path releases the
    tenant's slot."""
    failure = exc
    line = BATCH_LINE.get()
    if isinstance(exc, asyncio.CancelledError) and line is not None and line.is_given_up:
        exchange.error = "client_closed"   # a line its cancelled batch gave up: no one waits for it,
        exchange.close(None, CLIENT_CLOSED_STATUS)   # as a client that left (QA165: counted as a 503)
        raise exc
    if isinstance(exc, asyncio.CancelledError):   # the shutdown timeout: answered by gateway/fast_paths.py
        failure = request_cut_at_shutdown()
        exchange.cut_at_shutdown(failure)
        exchange.close(None, failure.status)
        raise exc
    if isinstance(exc, Exception) and not isinstance(exc, (ApiError, ClientGone)):
        log.error("unexpected error answering %s", exchange.prepared.request_id, exc_info=exc)
        failure = server_error()
    if isinstance(failure, ApiError):
        exchange.fail(failure)
    else:
        exchange.error = "client_closed"
    if isinstance(failure, ModelQueueFull):   # the limiter's own refusals are counted by `exchange.admit`
        exchange.state.metrics.record_rejection(exchange.prepared.tenant, failure.code or "")
    exchange.close(None, None if isinstance(failure, ApiError) else CLIENT_CLOSED_STATUS)
    if failure is exc:
        raise exc
    raise failure from exc


@dataclass(slots=True)
class ReplyShape:
    """How a reply is written: the endpoint's name (metrics), the whole body from the
    collected events, a stream writer (opening, event, done, error), and what to do once
    the request ended, whichever way (`Exchange.on_closed`). (What a reply keeps before its
    end is sent is its backend's: `responses_routes.KeptBeforeTheEnd`.)"""

    endpoint: str
    whole: Callable[[Reply, Usage], dict]
    writer: Callable[[], object]
    on_closed: Callable[[], None] | None = None


def chat_shape(prepared: Prepared, *, is_chat: bool, include_usage: bool, is_call: bool = False) -> ReplyShape:
    """`is_call`: the reply is known to be tool calls before it starts (a forced call)."""
    header = ResponseHeader(prepared.request_id, prepared.model,
                            service_tier=prepared.service_tier if is_chat else None)
    render = chat_completion if is_chat else text_completion
    return ReplyShape("chat" if is_chat else "completions", lambda reply, usage: render(header, reply, usage),
                      lambda: ChunkWriter(header, is_chat=is_chat, include_usage=include_usage,
                                          num_choices=prepared.num_choices, num_prompts=prepared.num_prompts,
                                          is_call=is_call))


def stream_status(completed: bool, failed: list[ApiError], cut: list[ApiError]) -> int:
    """The status a stream counts as (`stepahead_requests_total`), whose header said 200:
    the error's status when it ended with an error event (the model's or upstream's
    failure, a worker that died, a bug: as the event says; the shutdown's cut: 503),
    200 when its body was written to its end without one, else a client that left (499)."""
    if failed:
        return failed[0].status
    if cut:
        return cut[0].status
    return 200 if completed else CLIENT_CLOSED_STATUS


async def respond(request: Request, state: GatewayState, backend: Backend, prepared: Prepared,
                  *, is_chat: bool, stream: bool, include_usage: bool, started_s: float,
                  trace: StepContext | None = None, shape: ReplyShape | None = None, is_call: bool = False) -> Response:
    shape = shape or chat_shape(prepared, is_chat=is_chat, include_usage=include_usage, is_call=is_call)
    keep_output = not stream or trace is not None
    exchange = Exchange(state, prepared, shape.endpoint, started_s, is_streamed=stream, on_closed=shape.on_closed,
                        trace=trace, output=Reply.of(prepared.num_choices, prepared.num_prompts) if keep_output else None)
    if not stream:
        return await _respond_whole(request, exchange, lambda: run_choices(backend, prepared), shape)
    return await _respond_stream(request, exchange, lambda: run_choices(backend, prepared), shape)


async def _run_again_if_its_worker_died(exchange: Exchange, new_events: Callable[[], AsyncIterator[ChatEvent]],
                                        consume: Callable[[AsyncIterator[ChatEvent]], Awaitable[T]]
                                        ) -> tuple[AsyncIterator[ChatEvent], T]:
    """`consume` a run of the backend's events, before anything of the reply is sent; a
    run whose worker died under it is dropped and run again from the start, up to
    `UNSENT_REPLY_ATTEMPTS` runs. Returns the run's events, still open, and what `consume`
    gave; a run that fails (or is cancelled) is closed before the error leaves."""
    attempt = 1
    while True:
        events = new_events()
        try:
            return events, await consume(events)
        except ApiError as error:
            await events.aclose()
            if error.code != "worker_died" or attempt == UNSENT_REPLY_ATTEMPTS:
                raise
            log.warning("stepahead: request %s runs again: %s", exchange.prepared.request_id, error.message)
            exchange.restart()
            attempt += 1
        except BaseException:
            await events.aclose()
            raise


def _leave_cut_headers(request: Request, exchange: Exchange, exc: BaseException) -> None:
    """When the shutdown cut the request before its answer began, leave its headers for
    the 503 gateway/fast_paths.py answers (its traced step's id, its session, its
    tenant's rate limits: QA137, QA142)."""
    if isinstance(exc, asyncio.CancelledError):
        request.scope[CUT_REPLY_HEADERS] = exchange.reply_headers(exchange.overhead_s())


async def _respond_whole(request: Request, exchange: Exchange,
                         new_events: Callable[[], AsyncIterator[ChatEvent]], shape: ReplyShape) -> Response:
    async def whole_reply(events: AsyncIterator[ChatEvent]) -> Reply:
        reply = exchange.output  # `next_event` collects into it
        while not reply.is_done:
            await exchange.next_event(events)
        return reply

    async def work() -> Reply:
        await exchange.acquire()
        events, reply = await _run_again_if_its_worker_died(exchange, new_events, whole_reply)
        await events.aclose()
        return reply

    try:
        reply = await race_disconnect(work(), request.receive)
        finished = reply.finished  # every candidate's tokens count, the discarded too
        prepared = exchange.prepared
        if prepared.best_of > 1:
            reply = exchange.output = reply.best(prepared.num_returned, keep_logprobs=prepared.keep_logprobs)
        body = shape.whole(reply, finished.usage if finished else Usage())
    except BaseException as exc:
        _leave_cut_headers(request, exchange, exc)
        _raise_failed(exchange, exc)
    exchange.close(finished, 200)
    overhead_s = exchange.overhead_s()
    exchange.state.metrics.record_overhead(exchange.prepared.tenant, overhead_s)
    return Response(dumps(body), media_type="application/json", headers=exchange.reply_headers(overhead_s))


async def _respond_stream(request: Request, exchange: Exchange,
                          new_events: Callable[[], AsyncIterator[ChatEvent]], shape: ReplyShape) -> Response:
    async def work() -> tuple[AsyncIterator[ChatEvent], ChatEvent]:
        await exchange.acquire()
        return await _run_again_if_its_worker_died(exchange, new_events, exchange.next_event)

    try:
        events, first = await race_disconnect(work(), request.receive)
    except BaseException as exc:   # its run is closed already
        _leave_cut_headers(request, exchange, exc)
        _raise_failed(exchange, exc)
    writer = shape.writer()
    outcome: list[Finished] = []

    async def chunks() -> AsyncIterator[bytes]:
        event = first
        try:
            opening = writer.opening()
            while True:
                data = writer.event(event)
                if opening:
                    data, opening = opening + data, b""
                if isinstance(event, Finished):
                    outcome.append(event)
                is_last = len(outcome) == exchange.prepared.num_choices
                yield data
                if is_last:
                    break
                event = await exchange.next_event(events)
            yield writer.done()
        except ApiError as error:
            failed.append(error)
            exchange.fail(error)
            yield writer.error(error.body())
        except Exception:   # NOTE: a bug mid-stream still ends as an SSE error event
            log.exception("unexpected error while streaming %s", exchange.prepared.request_id)
            error = server_error()
            failed.append(error)
            exchange.fail(error)
            yield writer.error(error.body())
        finally:
            await events.aclose()

    failed: list[ApiError] = []   # the error a begun stream ended with (its last event)
    cut: list[ApiError] = []

    def on_cut() -> bytes:
        error = stream_cut_at_shutdown()
        cut.append(error)
        exchange.cut_at_shutdown(error)
        return writer.error(error.body())

    def on_close(completed: bool) -> None:
        whole = len(outcome) == exchange.prepared.num_choices and not failed
        status = stream_status(completed, failed, cut)
        try:
            finished = merged_usage(outcome, exchange.prepared.num_prompts) if whole else None
        except Exception:   # NOTE: a bug in the reply's usage must not keep the tenant's slot
            log.exception("could not sum the usage of %s", exchange.prepared.request_id)
            finished = None
        exchange.close(finished, status)

    overhead_s = exchange.overhead_s()
    exchange.state.metrics.record_overhead(exchange.prepared.tenant, overhead_s)
    return EventStreamResponse(chunks(), headers=exchange.reply_headers(overhead_s), on_close=on_close,
                               on_cut=on_cut)
