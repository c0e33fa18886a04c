"""Generating one background response, detached from the request that asked for it.

The run is admitted by the tenant's limits like any request, then generates into its
event log (`gateway.background_runs`) through the Responses stream writer, whether or not
anyone reads the stream. It is stored `queued` before its id is handed out
(`responses_routes`: a row the file cannot take is a 500, and it never runs), stored
again `in_progress` once admitted (so that a gateway that dies leaves it to be read back
as ended, `gateway.response_store`, never a 404), and its end is stored as the
response's final object:
`completed` / `incomplete` with the conversation (so `previous_response_id` continues it;
a `conversation`'s turn is added to it before the run's last event is made,
`responses_routes.KeptBeforeTheEnd`, and one that cannot be added fails the run),
`failed` with an OpenAI error object (a queue timeout is `rate_limit_exceeded`; the
gateway's stop, `response_store.stopped_error`: `server_error`, saying the gateway stopped
and the request may be retried) with the output made until then, or `cancelled` (only by
its client: `POST /v1/responses/{id}/cancel`, `DELETE`) with the output made until then
(the item it was writing `incomplete`) and, for a local model that had begun answering,
the usage so far.

A refusal by the tenant's limits that waiting cures (a 429 `rate_limit_exceeded` without
`x-should-retry: false`: its rate, its queue, tokens of its budget only in flight) keeps
the run `queued`, waiting as `Retry-After` says and asking again, for up to
MAX_ADMISSION_WAIT_S; then it fails with that refusal (QA99: it failed at once, "retry
shortly", and nothing retried it). Each time it asks again it is prepared again
(`BackgroundJob.prepare_again`), so a request that set no `max_output_tokens` takes its
share of the budget as it stands then, not the nothing it had while others ran (QA102).
The model refusing it before it began — its queue for the tenant full (`ModelQueueFull`,
the same 429), or its workers all busy (503 `overloaded`) — is waited out the same way,
within the same MAX_ADMISSION_WAIT_S (QA102: it failed the run at once). Only the refusal that ends the wait counts in
`stepahead_rejected_total`: the tries before it were not refusals its client saw (QA102).

Invariants: the run's ticket, trace step and metrics are closed exactly once (through
`Exchange`); its traced step keeps the output made until it ended, as its stored
response does, also when it failed or was cancelled (the run's log is a stream that was
sent: `Exchange.is_streamed`; QA137 #6); the final object is stored before the run is
marked done, so a reader that sees the log end finds it; nothing here waits on the client; a cancel ends the item the
run was writing (its `.done` events) before `response.cancelled` (a stop: before
`response.failed`), so every item in the log is closed, the numbers stay contiguous and
the log's last event is the stored object's status.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agents_trace.records import StepContext

from gateway.background_runs import BackgroundRun
from gateway.backend import Backend, Prepared, Usage
from gateway.choices import run_choices
from gateway.errors import SHUTTING_DOWN_CODE, ApiError, says_never_retry, server_error
from gateway.exchange import CLIENT_CLOSED_STATUS, Exchange
from gateway.collected import Collected, Reply
from gateway.engine_streams import ModelQueueFull
from gateway.response_store import SHUT_DOWN, stopped_error
from gateway.responses_objects import final_status
from gateway.responses_stream import ResponsesStreamWriter
from gateway.state import GatewayState

log = logging.getLogger("stepahead.gateway")
MAX_ADMISSION_WAIT_S = 300.0   # how long a background run waits out refusals that waiting cures


@dataclass(slots=True)
class BackgroundJob:
    """What a background response needs to run; `keep(response, collected)` stores it as
    it stands (`collected` None: when admitted, and when it failed or was cancelled)."""

    state: GatewayState
    backend: Backend
    prepared: Prepared
    writer: ResponsesStreamWriter
    keep: Callable[[dict, Collected | None], None]
    started_s: float
    trace: StepContext | None = None
    prepare_again: Callable[[], Awaitable[Prepared]] | None = None   # the request prepared anew
    on_closed: Callable[[], None] | None = None   # once the run ended, whichever way (`Exchange.on_closed`)


async def generate(job: BackgroundJob, run: BackgroundRun) -> None:
    exchange = Exchange(job.state, job.prepared, "responses", job.started_s, trace=job.trace,
                        output=Reply.of(1), is_streamed=True, on_closed=job.on_closed)   # its log: the output so far
    events = None
    writer = job.writer
    try:
        deadline_s = asyncio.get_running_loop().time() + MAX_ADMISSION_WAIT_S
        await _admitted(job, exchange, deadline_s)
        run.status = "in_progress"
        job.keep(writer.snapshot("in_progress"), None)   # off the event loop: the store's thread writes it
        run.append(writer.started())
        events, first = await _begun(job, exchange, deadline_s)
        run.append(writer.event(first))
        reply = exchange.output
        while not reply.is_done:
            run.append(writer.event(await exchange.next_event(events)))
        finished = reply.finished
        job.keep(writer.snapshot(final_status(reply.first), finished.usage), reply.first)
        exchange.close(finished, 200)
    except asyncio.CancelledError:
        if events is not None:
            await _closed(events, run.response_id)   # its local runs count the tokens they made as they end
        if run.stopped_by_shutdown:   # the gateway's stop ended it, not its client: `failed`, and it says so
            details = stopped_error(SHUT_DOWN)
            exchange.error, exchange.error_message = SHUTTING_DOWN_CODE, details["message"]
            exchange.close(None, 503)  # counted as the shutdown's cut (serving.md "Metrics"); charged what it made
            usage = usage_so_far(job.prepared)
            ended = writer.failed(details, usage)   # ends the item it was writing: the stored object lists it
            job.keep(writer.snapshot("failed", usage, error=details), None)
        else:
            exchange.error = "cancelled"
            exchange.close(None, CLIENT_CLOSED_STATUS)  # counted as a client that left
            usage = usage_so_far(job.prepared)
            ended = writer.cancelled(usage)   # ends the item it was writing: the stored object lists it
            job.keep(writer.snapshot("cancelled", usage), None)
        run.append(ended)
    except Exception as exc:  # NOTE: an ApiError from admission or the backend, or a bug: the run fails
        if not isinstance(exc, ApiError):
            log.exception("background response %s failed", run.response_id)
        error = exc if isinstance(exc, ApiError) else server_error()
        exchange.fail(error)
        exchange.close(None, error.status)
        details = {"code": error.code or error.type, "message": error.message}
        ended = writer.failed(details)   # ends the item it was writing: the stored object lists it (QA128)
        job.keep(writer.snapshot("failed", error=details), None)
        run.append(ended)
    finally:
        try:
            if events is not None:
                await events.aclose()
        finally:
            run.finish()


def _wait_cures(error: ApiError) -> float | None:
    """The seconds a refusal says to wait before asking again (`Retry-After`, at least 1),
    None when waiting does not cure it: only a 429 `rate_limit_exceeded` (the tenant's
    limits, the model's queue for the tenant) or a 503 `overloaded` (no worker took it in
    time) cures, and not one that says never to retry."""
    curable = (error.status, error.code) in ((429, "rate_limit_exceeded"), (503, "overloaded"))
    if not curable or says_never_retry(error):
        return None
    try:
        return max(1.0, float(error.headers.get("Retry-After", "1")))
    except ValueError:
        return 1.0


async def _admitted(job: BackgroundJob, exchange: Exchange, deadline_s: float) -> None:
    """Admit the run, waiting out refusals that waiting cures (`_wait_cures`) until
    `deadline_s` (the loop's clock), the request prepared again before each new try; the
    last refusal is raised after that, or one waiting does not cure, and only it is counted
    as the tenant's refusal."""
    while True:
        try:
            await exchange.acquire(count_refusal=False)
            return
        except ApiError as error:
            if not await _waited_out(error, deadline_s):
                exchange.state.metrics.record_rejection(exchange.prepared.tenant, error.code or "")
                raise
            if job.prepare_again is not None:
                job.prepared = exchange.prepared = await job.prepare_again()


async def _begun(job: BackgroundJob, exchange: Exchange, deadline_s: float):
    """The run's events and the first of them, a refusal before it began that waiting
    cures (the model's queue for the tenant full, `ModelQueueFull`; its workers all busy, a
    503 `overloaded`; an upstream's 429) waited out as `_admitted` waits, the same prepared
    request sent again (the tenant's limits admitted it as it is). Of these, only the
    model's queue refusing the tenant counts as the tenant's refusal, as it does for a
    request answered at once (`respond`)."""
    while True:
        events = run_choices(job.backend, job.prepared)
        try:
            return events, await exchange.next_event(events)
        except ApiError as error:
            await events.aclose()
            if not await _waited_out(error, deadline_s):
                if isinstance(error, ModelQueueFull):
                    exchange.state.metrics.record_rejection(exchange.prepared.tenant, error.code or "")
                raise
        except BaseException:
            await events.aclose()
            raise


async def _waited_out(error: ApiError, deadline_s: float) -> bool:
    """Wait as `error` asks when waiting cures it and the wait ends before `deadline_s`;
    False (at once) otherwise."""
    loop = asyncio.get_running_loop()
    wait_s = _wait_cures(error)
    if wait_s is None or loop.time() + wait_s > deadline_s:
        return False
    await asyncio.sleep(wait_s)
    return True


async def _closed(events, response_id: str) -> None:
    """Close a cancelled run's events, so that its local runs end and add the tokens they
    generated (`GeneratedTokens`); a second cancel meanwhile leaves the count as it stands."""
    try:
        await events.aclose()
    except asyncio.CancelledError:
        pass
    except Exception:  # NOTE: the run is stored cancelled all the same
        log.exception("background response %s: closing its cancelled run failed", response_id)


def usage_so_far(prepared: Prepared) -> Usage | None:
    """The usage of a run cancelled mid-way: its prompt, the tokens its local runs
    generated until then and the prompt tokens they found cached, once the model had
    begun answering; None when unknown (an upstream model's cut stream counts nothing,
    and nothing is counted before the first token)."""
    if not prepared.prompt_is_counted or prepared.generated.worker is None:
        return None
    return prepared.usage_so_far()
