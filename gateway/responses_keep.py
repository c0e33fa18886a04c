"""What a Responses request keeps before the client reads its end (`KeptBeforeTheEnd`),
moved out of responses_routes.py (which imports it, so `responses_routes.KeptBeforeTheEnd`
still names it).

Invariant: a run's `Finished` event is passed on only once `keep` returned; a `keep` that
raises ends the run with that error instead, so no success is answered that was not kept.
"""
from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from gateway.backend import Finished
from gateway.collected import Collected


class KeptBeforeTheEnd:
    """`backend` as a Responses request whose end is kept runs on it: its `Finished` event,
    which the client reads as the end (the JSON body; `response.completed` or
    `response.incomplete`), comes only once `keep(collected)` has stored the response and
    added the turn to its conversation, off the event loop (the stores' threads); a write
    that fails ends the run with its 500 instead, as any failure of a run does (a 500
    answer, or a stream's `response.failed`), so no success is answered that was not kept."""

    def __init__(self, backend, keep: Callable[[Collected], Awaitable[None]]) -> None:
        self._backend = backend
        self._keep = keep

    def __getattr__(self, name: str):
        return getattr(self._backend, name)

    async def run(self, prepared) -> AsyncIterator:
        events = self._backend.run(prepared)
        collected = Collected()   # a Responses request makes one choice
        try:
            async for event in events:
                collected.add(event)
                if isinstance(event, Finished):
                    await self._keep(collected)
                yield event
        finally:
            await events.aclose()
