"""One local engine request as the gateway reads it: its events with the engine's errors
as HTTP errors (`engine_events`), and the short continuations a forced or structured
reply is written with (`Continuations`), whose text suffixes are tokenized as they grow
(gateway/suffix_tokens.py).

Invariants: every engine stream is closed when its reader stops (so the worker cancels
the request and frees its blocks); an `ErrorEvent` becomes an `ApiError` (429/503 for the
engine's admission refusals, 503 for retryable failures, a 499 for a stream the engine cut
because its client stopped reading, 500 otherwise); continuations
count every token the workers sent (one stopped early counts what it sent) and together
never exceed the request's `max_tokens`; one whose budget is spent asks for nothing (it
tokenizes nothing either), and the tokens of a suffix are found with work that grows with
what was added since the last suffix, not with the whole (`suffix_tokens.SuffixTokens`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shards.engine_streams import MAX_UNREAD_TOKENS, READ_TOO_SLOWLY
from shards.protocol import ErrorEvent, FinishEvent, TokenEvent, WorkItem

from gateway.backend import Finished, Prepared, Usage
from gateway.errors import ApiError, invalid_request, rate_limited, server_error, unavailable
from gateway.suffix_tokens import SuffixTokens

READ_TOO_SLOWLY_STATUS = 499   # counted as a client that left (gateway.exchange.CLIENT_CLOSED_STATUS)

if TYPE_CHECKING:
    from gateway.local_generation import LocalCall


@dataclass(slots=True)
class ModelQueueFull(ApiError):
    """The engine refused the request: the model's queue for its tenant is full (a 429
    `rate_limit_exceeded`, as the tenant's own limits answer). A refusal of the tenant,
    so one that fails a request counts in `stepahead_rejected_total` as theirs do."""

    @classmethod
    def of(cls, error: ApiError) -> "ModelQueueFull":
        return cls(error.status, error.message, error.type, error.code, error.param, error.headers)


def error_from_event(event: ErrorEvent) -> ApiError:
    """The engine's error codes as HTTP: its admission refusals keep their meaning (429 for
    a full tenant queue, as `ModelQueueFull`; 503 when every queue is full), with the
    engine's Retry-After."""
    retry_after_s = math.ceil(getattr(event, "retry_after_s", None) or 1)
    if event.code == "rate_limit_exceeded":
        return ModelQueueFull.of(rate_limited(f"The model's queue for this tenant is full: {event.message}",
                                              retry_after_s))
    if event.code in ("overloaded", "shutting_down") or event.retryable:
        state = "overloaded" if event.code == "overloaded" else "unavailable"   # (no worker took it in time)
        error = unavailable(f"The model is {state}: {event.message}", code=event.code)
        error.headers["Retry-After"] = str(max(1, min(60, retry_after_s)))
        return error
    if event.code == "invalid_request":
        return invalid_request(f"The model rejected the request: {event.message}")
    return server_error(f"The model worker failed: {event.message}", code=event.code)


def read_too_slowly(engine) -> ApiError:
    """What a reply ends with when the engine cut it because its client stopped reading
    (`READ_TOO_SLOWLY`; the engine's error would say its worker failed): a 499, counted
    as a client that left."""
    bound = getattr(engine, "max_unread_tokens", MAX_UNREAD_TOKENS)
    return ApiError(READ_TOO_SLOWLY_STATUS, f"The client read this stream too slowly: more than {bound} tokens "
                    "waited unread, so the model stopped generating the reply.", "invalid_request_error",
                    READ_TOO_SLOWLY)


async def engine_events(engine, item: WorkItem) -> AsyncIterator[TokenEvent | FinishEvent]:
    """`engine.generate(item)` with errors raised as `ApiError`.

    NOTE: no retry here: the engine's dispatcher already re-queues a request whose worker
    died before its first token.
    """
    async with contextlib.aclosing(engine.generate(item)) as events:
        async for event in events:
            if isinstance(event, ErrorEvent):
                raise read_too_slowly(engine) if event.code == READ_TOO_SLOWLY else error_from_event(event)
            yield event
            if isinstance(event, FinishEvent):
                return


class Continuations:
    """Short generations that each continue the request's prompt with a text suffix (a
    prefix-cache hit on the prompt); usage sums them all, and together they never exceed
    the request's `max_tokens`. Called as `tool_forcing.Generate`. The first asks the engine
    queue for `queue_room` (`gateway.choices.queue_room`; 0, the default: repairs of a reply
    already admitted), the others for none: they belong to a request already admitted.

    Usage's cache counts are the prompt's own, as a plain reply's (its suffix is no prompt):
    `num_cached_tokens`, the full prompt blocks the first generation found cached, at most
    those before the prompt's last token; `num_cache_write_tokens`, the full prompt blocks
    its worker wrote there as new. A worker commits the prompt with its first token, so a
    first generation closed before its finish (as forcing does) wrote all it did not find
    (unless the cache had no room: its finish would have said); the later ones write only
    suffix blocks, which are not counted."""

    def __init__(self, engine, prepared: Prepared, call: LocalCall, queue_room: int = 0):
        self.engine, self.prepared, self.call = engine, prepared, call
        self._queue_room = queue_room
        self.usage = Usage(num_prompt_tokens=len(call.prompt_token_ids), num_cache_write_tokens=0)
        self.worker, self.ttft_s = "local", None  # where the first generation ran, its TTFT
        self._has_first = False
        self.max_total = call.sampling.max_tokens
        self.last_finish_reason: str | None = None   # the last generation read to its end
        self._num_runs = 0
        self._reading: set = set()   # the engine streams being read, for `close`
        self.suffix_tokens = SuffixTokens(engine.tokenizer)
        self._block_size = max(1, getattr(getattr(engine, "config", None), "block_size", 1))
        self._first_run = 0   # the generation that gave the first event, once one did
        self._num_unfound_prompt_tokens = 0   # the prompt's full blocks it did not find cached

    async def __call__(self, suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        return "".join([text async for text in self.stream(suffix, max_tokens, stop)])

    def can_ask(self) -> bool:
        """Whether a continuation may still reach the engine: not once the generations have
        used `max_total` tokens (`stream` then answers nothing at once). The filler writes
        without the model from there, and sends what it writes in few pieces
        (`json_filling.CanAsk`)."""
        return self.usage.num_completion_tokens < self.max_total

    async def stream(self, suffix: str, max_tokens: int, stop: tuple[str, ...]) -> AsyncIterator[str]:
        """The continuation's text as it is generated (`tool_forcing.GenerateStream`). Its
        tokens count in the usage even when the caller stops reading early (closing the
        stream cancels the rest); the first continuation names the worker and TTFT."""
        call = self.call
        left = min(self.max_total - self.usage.num_completion_tokens, max_tokens)
        if left <= 0:   # the budget is spent: nothing to ask, nothing to tokenize
            return
        suffix_room = self.engine.max_context_tokens - len(call.prompt_token_ids)
        suffix_ids = await self.suffix_tokens.encode(suffix, suffix_room) if suffix_room > 0 else None
        if suffix_ids is None:
            return
        ids = call.prompt_token_ids + suffix_ids
        room = min(left, self.engine.max_context_tokens - len(ids))
        if room <= 0:
            return
        sampling = dataclasses.replace(call.sampling, max_tokens=room, stop=stop)
        self._num_runs += 1
        run = self._num_runs
        item = WorkItem(f"{self.prepared.request_id}-{run}", self.prepared.tenant, ids,
                        sampling, call.session, flex=call.flex, queue_room=self._queue_room)
        self._queue_room = 0
        num_tokens, started_s = 0, time.perf_counter()
        events = engine_events(self.engine, item)
        self._reading.add(events)
        try:
            async with contextlib.aclosing(events):
                async for event in events:
                    if isinstance(event, TokenEvent):
                        num_tokens += len(event.token_ids)
                        if event.worker_id is not None:
                            self._first(run, event.worker_id, time.perf_counter() - started_s,
                                        event.num_cached_tokens)
                        if event.text:
                            yield event.text
                    else:
                        num_tokens = event.num_output_tokens
                        self.last_finish_reason = event.finish_reason
                        self._first(run, event.worker_id, event.ttft_s, event.num_cached_tokens)
                        if run == self._first_run:
                            self._wrote(event.num_cache_write_tokens)
        finally:
            self._reading.discard(events)
            self.usage.num_completion_tokens += num_tokens

    async def close(self) -> None:
        """Stop every generation still being read: the reply was abandoned (its client
        went away) while generators between it and the engine streams were suspended."""
        for events in list(self._reading):
            await events.aclose()

    def _first(self, run: int, worker_id: str, ttft_s: float, num_cached_tokens: int | None) -> None:
        """The first event of the request's generations: the worker, the TTFT, the prompt's
        cached full blocks (of prompt + suffix, it found `num_cached_tokens`), and as written
        the prompt's other full blocks (`_wrote` corrects it when this generation finishes)."""
        if not self._has_first:
            self._has_first, self._first_run = True, run
            self.worker, self.ttft_s = worker_id or "local", ttft_s
            block, num_prompt = self._block_size, self.usage.num_prompt_tokens
            num_found = (num_cached_tokens or 0) // block * block
            self.usage.num_cached_tokens = min(num_found, max(0, num_prompt - 1) // block * block)
            self._num_unfound_prompt_tokens = max(0, num_prompt // block * block - num_found)
            self.usage.num_cache_write_tokens = self._num_unfound_prompt_tokens
            self.prepared.generated.run_started(self.worker, self.usage.num_cached_tokens,
                                                is_prompt_head=self.prepared.is_prompt_head)

    def _wrote(self, num_tokens: int) -> None:
        """The first generation's finish: its worker wrote `num_tokens` (of prompt + suffix,
        from where it found the cache ending): the prompt's full blocks among them."""
        block = self._block_size
        self.usage.num_cache_write_tokens = min(num_tokens // block * block, self._num_unfound_prompt_tokens)

    def finished(self, finish_reason: str) -> Finished:
        return Finished(finish_reason, self.usage, worker=self.worker, ttft_s=self.ttft_s)
