"""One request's events on their way from the workers to its reader (`LocalEngine.generate`):
a queue that counts the tokens put into it, and bounds those that wait unread
(`RequestStream`); and what a `LocalEngine` does with them (`EngineStreams`, a base class
of it: it uses the engine's `_lock`, `_streams`, `_dispatcher` and `_perform`).

A reader that stops reading (a stream whose client's socket is full) leaves the worker's
tokens to pile up here; the worker would decode on toward `max_tokens` for nobody, and
every token event, log probabilities and all, would stay in the gateway's memory.

Invariants:
- `num_tokens_put` counts every token of every `TokenEvent` put, read or not: what the
  workers generated for the request as far as they sent it (a reader that leaves is
  charged those, `LocalEngine.num_generated`); `num_tokens_read` those taken;
- once more than `max_unread_tokens` wait unread, `on_overflow(request_id)` is called,
  once (the engine cancels the request on its worker: no more decoding, no more events);
  what was queued is still read in order, and the stream then ends with an `ErrorEvent`
  (`READ_TOO_SLOWLY`) naming how many tokens waited, unless a terminal event was queued
  before it (a reply already whole ends as it ended);
- events are taken in the order they were put; only the stream's event loop touches it
  (`shards.engine_messages._put_each` puts, the reader gets).
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable

from shards.protocol import EngineEvent, ErrorEvent, TokenEvent

# past this many tokens waiting unread, a request is cut: its reader stopped reading. A
# client that reads is never this far behind a worker (the kernel's socket buffers and
# uvicorn's hold what it has not taken yet); with `top_logprobs` 20 it is ~15 MB of events
MAX_UNREAD_TOKENS = 4096
READ_TOO_SLOWLY = "client_read_too_slowly"   # the ErrorEvent code of a stream so cut


class RequestStream:
    """The queue between the workers' events for one request and its reader."""

    __slots__ = ("request_id", "max_unread_tokens", "num_tokens_put", "num_tokens_read", "num_cut_unread",
                 "_on_overflow", "_queue")

    def __init__(self, request_id: str, max_unread_tokens: int, on_overflow: Callable[[str], None]) -> None:
        self.request_id = request_id
        self.max_unread_tokens = max_unread_tokens
        self.num_tokens_put = 0
        self.num_tokens_read = 0
        self.num_cut_unread: int | None = None   # the tokens that waited unread when it was cut
        self._on_overflow = on_overflow
        self._queue: asyncio.Queue[EngineEvent] = asyncio.Queue()

    @property
    def num_unread_tokens(self) -> int:
        return self.num_tokens_put - self.num_tokens_read

    def put_nowait(self, event: EngineEvent) -> None:
        """Queue a worker's event (on the stream's loop); past the bound, cut the request."""
        self._queue.put_nowait(event)
        if not isinstance(event, TokenEvent):
            return
        self.num_tokens_put += len(event.token_ids)
        if self.num_cut_unread is None and self.num_unread_tokens > self.max_unread_tokens:
            self.num_cut_unread = self.num_unread_tokens
            self._on_overflow(self.request_id)

    async def get(self) -> EngineEvent:
        """The next event; once a cut stream's queue is read, the `ErrorEvent` that ends it."""
        if self.num_cut_unread is not None and self._queue.empty():
            return ErrorEvent(self.request_id, f"the client read too slowly: {self.num_cut_unread} tokens "
                                               f"waited unread", READ_TOO_SLOWLY)
        event = await self._queue.get()
        if isinstance(event, TokenEvent):
            self.num_tokens_read += len(event.token_ids)
        return event


class EngineStreams:
    """The request streams' side of a `LocalEngine`."""

    max_unread_tokens = MAX_UNREAD_TOKENS   # a request's tokens waiting unread before it is cut

    def _cut_unread(self, request_id: str) -> None:
        """A request's reader left more than `max_unread_tokens` unread (on its loop): cancel
        it on its worker, as a reader that leaves does."""
        with self._lock:
            self._perform(self._dispatcher.cancel(request_id))

    def num_generated(self, request_id: str) -> int | None:
        """The tokens the workers sent for a request still being read, read or not; None
        once its stream ended. Asked before a reader that leaves closes the stream, it is
        what that request was generated."""
        with self._lock:
            target = self._streams.get(request_id)
        return None if target is None else target[1].num_tokens_put
