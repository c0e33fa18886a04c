"""A reader's stream of a background response's events (`POST /v1/responses` with
`stream` and `background`, `GET /v1/responses/{id}?stream=true&starting_after=N`).

Invariants: the reader gets the run's events after `starting_after` in order, then each
new one until the run ends; its leaving never stops the run. A reader the server's
shutdown timeout cuts gets the run's events it was not sent yet (a slow reader lags the
run), then an `error` event numbered as the run's next, so the numbers it reads stay
contiguous.
"""
from __future__ import annotations

from collections.abc import AsyncIterator

from gateway.background_runs import BackgroundRun
from gateway.errors import stream_cut_at_shutdown
from gateway.http_io import EventStreamResponse
from gateway.responses_stream import sse_event


def run_event_stream(run: BackgroundRun, starting_after: int) -> EventStreamResponse:
    """The stream of `run`'s events after sequence number `starting_after` (-1: all)."""
    next_index = max(starting_after + 1, 0)   # the first event not yet sent whole

    async def events() -> AsyncIterator[bytes]:
        nonlocal next_index
        async for event in run.follow(starting_after):
            yield event
            next_index += 1   # resumed only once the stream asks for the next: this one was sent

    def on_cut() -> bytes:
        error = stream_cut_at_shutdown(
            "The gateway is shutting down and cut this stream; the background response is cancelled with it "
            f"(GET /v1/responses/{run.response_id} shows how far it got).")
        return b"".join(run.events[next_index:]) + sse_event("error", len(run.events), code=error.code,
                                                             message=error.message, param=None)

    return EventStreamResponse(events(), headers={}, on_close=lambda _completed: None, on_cut=on_cut)
