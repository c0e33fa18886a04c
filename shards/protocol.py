"""Messages between the gateway/router and a model worker.

These records cross a process boundary (multiprocessing queues, later Ray), so they are
plain slots dataclasses of builtins: picklable, no tensors, no callables.
A request's event stream is: zero or more `TokenEvent`, then exactly one terminal event,
either `FinishEvent` or `ErrorEvent`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Union


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Decoding settings. temperature 0 means greedy; `seed` makes sampling repeatable."""

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False


@dataclass(slots=True)
class WorkItem:
    """One generation request, already tokenized. `tenant` salts the KV cache; it comes
    from the authenticated key, never from a client field."""

    request_id: str
    tenant: str
    prompt_token_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    session: str | None = None
    enqueued_at_s: float = 0.0


@dataclass(slots=True)
class TokenEvent:
    """New tokens for a request and the text they completed (may be empty while a
    multi-byte character is still incomplete)."""

    request_id: str
    token_ids: list[int]
    text: str


FinishReason = Literal["stop", "length", "cancelled"]


@dataclass(slots=True)
class FinishEvent:
    """The request ended normally. `num_cached_tokens` prompt tokens were served from
    the prefix cache, so only the rest were prefilled."""

    request_id: str
    finish_reason: FinishReason
    num_prompt_tokens: int
    num_cached_tokens: int
    num_output_tokens: int
    ttft_s: float
    worker_id: str = ""


@dataclass(slots=True)
class ErrorEvent:
    """The request failed. `code` is an OpenAI-style error code; `retryable` is True only
    when no token was produced yet, so the router may send it elsewhere."""

    request_id: str
    message: str
    code: str = "internal_error"
    retryable: bool = False


EngineEvent = Union[TokenEvent, FinishEvent, ErrorEvent]


# --- control messages between an engine and its worker processes -------------------

@dataclass(frozen=True, slots=True)
class CancelRequest:
    request_id: str


@dataclass(frozen=True, slots=True)
class Shutdown:
    pass


@dataclass(frozen=True, slots=True)
class StatsRequest:
    pass


@dataclass(slots=True)
class WorkerReady:
    worker_id: str
    model_id: str
    max_context_tokens: int
    pid: int


@dataclass(slots=True)
class WorkerStats:
    """A worker's cache statistics snapshot (plain dicts, see BlockManager.stats())."""

    worker_id: str
    stats: dict
    num_running: int
    num_waiting: int


@dataclass(slots=True)
class WorkerFailed:
    """The worker could not start (e.g. the model failed to load)."""

    worker_id: str
    message: str
