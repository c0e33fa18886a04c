"""A reader's stream of a background response's events (`POST /v1/responses` with
`stream` and `background`, `GET /v1/responses/{id}?stream=true&starting_after=N`).

Invariants: the reader gets the run's events after `starting_after` in order, then each
new one until the run ends; its leaving never stops the run. A run the gateway's stop
ended (at the signal, `BackgroundRuns.stop_all`) ends its log with `response.failed`
(`response_store.stopped_error`), as its stored object is. A reader the server's shutdown
timeout cuts gets the run's events it was not sent yet (a slow reader lags the run), then,
unless they end with the run's final event, an `error` event (`server_shutting_down`)
numbered as the run's next, as does a reader of a run the stop ended without its final
event: the numbers a reader reads stay contiguous, and it is told why once.
"""
from __future__ import annotations

from collections.abc import AsyncIterator

from gateway.background_runs import BackgroundRun
from gateway.errors import stream_cut_at_shutdown
from gateway.http_io import EventStreamResponse
from gateway.responses_stream import sse_event

ENDINGS = tuple(f"event: response.{status}\n".encode() for status in ("completed", "incomplete", "failed", "cancelled"))


def ended_by_the_stop(run: BackgroundRun) -> bool:
    """Whether `run`'s log ended without its final event though the gateway's stop ended it
    (its end, `response.failed`, could not be made; one that ended has its final event)."""
    return run.is_done and run.stopped_by_shutdown and not is_whole(run)


def is_whole(run: BackgroundRun) -> bool:
    """Whether `run`'s log holds its final event (`response.completed` ... `.cancelled`)."""
    return bool(run.events) and run.events[-1].startswith(ENDINGS)


def run_event_stream(run: BackgroundRun, starting_after: int,
                     headers: dict[str, str] | None = None) -> EventStreamResponse:
    """The stream of `run`'s events after sequence number `starting_after` (-1: all),
    answered with `headers` (the creating request's: its id and session)."""
    next_index = max(starting_after + 1, 0)   # the first event not yet sent whole
    told_why = False   # the shutdown's `error` event was sent

    def shutdown_error(message: str) -> bytes:
        error = stream_cut_at_shutdown(f"{message} (GET /v1/responses/{run.response_id} shows how far it got).")
        return sse_event("error", len(run.events), code=error.code, message=error.message, param=None)

    async def events() -> AsyncIterator[bytes]:
        nonlocal next_index, told_why
        async for event in run.follow(starting_after):
            yield event
            next_index += 1   # resumed only once the stream asks for the next: this one was sent
        if ended_by_the_stop(run):   # no `response.failed` in its log: the reader is told here
            yield shutdown_error("The gateway is shutting down and stopped this background response")
            told_why = True

    def on_cut() -> bytes:
        unsent = b"".join(run.events[next_index:])
        if told_why or (run.is_done and is_whole(run)):   # its last event says how it ended
            return unsent
        return unsent + shutdown_error("The gateway is shutting down and cut this stream; the background response "
                                       "stops with it and ends failed")

    return EventStreamResponse(events(), headers=dict(headers or {}), on_close=lambda _completed: None, on_cut=on_cut)
