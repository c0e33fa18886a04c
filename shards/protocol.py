"""Messages between the gateway/router and a model worker.

These records cross a process boundary (multiprocessing queues, later Ray), so they are
plain slots dataclasses of builtins: picklable, no tensors, no callables.
A request's event stream is: zero or more `TokenEvent`, then exactly one terminal event,
either `FinishEvent` or `ErrorEvent`. A worker sends a decode pass's messages as one
`EventBatch`, which the engine unpacks in order.
"""
from __future__ import annotations

import dataclasses
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
    logprobs: int | None = None  # None: none; N >= 0: each token's, with the N likeliest
    presence_penalty: float = 0.0  # OpenAI's: off each generated token's logit once
    frequency_penalty: float = 0.0  # ... and this much per time it was generated
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit)
    # None: none; N >= 0: each prompt token's given the ones before it (the first has
    # none), with the N likeliest. Needs every prompt position computed: no prefix reuse.
    prompt_logprobs: int | None = None


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
    # A request resumed after its worker died mid-stream (`resumed`): the last
    # `num_resumed_tokens` of `prompt_token_ids` are output that worker had already sent,
    # `num_resumed_chars` characters of text; this worker goes on from there as if it had
    # generated them (counted as output, under the penalties, their text not sent again).
    num_resumed_tokens: int = 0
    num_resumed_chars: int = 0
    # OpenAI's `service_tier: "flex"` (gateway/service_tiers.py says when): served after the
    # default tier wherever it waits (`shards.tiered_queue`), its prefill after theirs
    # (`shards.worker_prefill`), routed by load alone (`shards.router`)
    flex: bool = False
    # The engine queue room its admission needs (`Dispatcher.submit`'s `room`): 1, its own;
    # n, the first of a request's n runs (gateway.choices); 0, a later run of an admitted one
    queue_room: int = 1

    @property
    def num_prompt_tokens(self) -> int:
        """The request's own prompt, without output resumed from another worker."""
        return len(self.prompt_token_ids) - self.num_resumed_tokens

    def seeded(self, seed: int) -> "WorkItem":
        """This request with `seed` when it samples without a seed of its own: each of its
        draws is then a function of the seed and its position (`seed_for_position`), so it
        goes on unchanged when resumed on another worker. Greedy or seeded: as it is."""
        if self.sampling.seed is not None or self.sampling.temperature <= 0.0:
            return self
        return dataclasses.replace(self, sampling=dataclasses.replace(self.sampling, seed=seed))

    def resumed(self, sent_token_ids: list[int], num_sent_chars: int) -> "WorkItem":
        """This request, to go on after `sent_token_ids` (all its output sent so far, from
        every worker it ran on) and their `num_sent_chars` characters of text. Prompt log
        probabilities, sent with the first token, are not asked again."""
        prompt = self.prompt_token_ids[:self.num_prompt_tokens]
        return dataclasses.replace(self, prompt_token_ids=prompt + list(sent_token_ids),
                                   sampling=dataclasses.replace(self.sampling, prompt_logprobs=None),
                                   num_resumed_tokens=len(sent_token_ids), num_resumed_chars=num_sent_chars)


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """A sampled token's log probability under the model (before temperature and top_p)
    and the `top` likeliest tokens as (token id, log probability), likeliest first."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(slots=True)
class TokenEvent:
    """New tokens for a request and the text they completed (may be empty while a
    multi-byte character is still incomplete); `logprobs`, one per token id, when the
    request asked for them; `prompt_logprobs`, once, in the first event, for prompt
    tokens 1.. (the first event then may carry no token: the first one was a stop);
    `num_cached_tokens` and `worker_id`, in a worker's first event of the request: the
    prompt tokens it found cached (what the request's usage reports, should another worker
    finish it), and which worker it is (for a caller that stops reading before the finish)."""

    request_id: str
    token_ids: list[int]
    text: str
    logprobs: list[TokenLogprob] | None = None
    prompt_logprobs: list[TokenLogprob] | None = None  # in the request's first event, when asked
    num_cached_tokens: int | None = None
    worker_id: str | None = None


FinishReason = Literal["stop", "length", "cancelled"]


@dataclass(slots=True)
class FinishEvent:
    """The request ended normally. `num_cached_tokens` prompt tokens were served from
    the prefix cache, so only the rest were prefilled. `num_cache_write_tokens`: the prompt
    tokens this request wrote to the prefix cache, the full blocks of its prompt that its
    worker registered there as new (not those it found cached, nor a last partial block,
    nor blocks it had no room for); 0 with prefix caching off, or when it ended before its
    prompt was committed."""

    request_id: str
    finish_reason: FinishReason
    num_prompt_tokens: int
    num_cached_tokens: int
    num_output_tokens: int
    ttft_s: float
    worker_id: str = ""
    prefill_s: float = 0.0  # model time spent on the uncached prompt tokens
    num_cache_write_tokens: int = 0


@dataclass(slots=True)
class ErrorEvent:
    """The request failed. `code` is an OpenAI-style error code; `retryable` is True only
    when no token was produced yet, so the router may send it elsewhere. Admission
    refusals carry `retry_after_s` (codes "rate_limit_exceeded": this tenant's queue is
    full, answer 429; "overloaded": every queue is full, answer 503)."""

    request_id: str
    message: str
    code: str = "internal_error"
    retryable: bool = False
    retry_after_s: float | None = None


EngineEvent = Union[TokenEvent, FinishEvent, ErrorEvent]


@dataclass(slots=True)
class EventBatch:
    """A worker's messages from one decode pass (its requests' tokens and ends, and the
    cache reports between them), in order, sent as one: one write on the worker's side
    and one wake-up on the engine's, not one per request."""

    messages: list


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
    costs: "CostProfile | None" = None
    device: str = ""  # where the worker placed its weights, as loaded ("cpu", "cuda:0")
    dtype: str = ""  # of its weights and KV cache, as loaded ("auto" settled on its own node)


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


# --- health, cache reports, costs (shared-prefix transfers: shards/transfer_messages.py)

@dataclass(frozen=True, slots=True)
class Ping:
    """A health check; the worker answers with a Pong carrying the same nonce."""

    nonce: int
    sent_s: float


@dataclass(slots=True)
class Pong:
    worker_id: str
    nonce: int
    sent_s: float
    num_running: int
    num_waiting: int


@dataclass(slots=True)
class CacheEventsReport:
    """The worker's cache events (cache.events records), oldest first, since its last
    report; applied in order to the router's prefix index."""

    worker_id: str
    events: list


@dataclass(slots=True)
class CacheSnapshot:
    """Every matchable block hash of the worker, per tier: the index reconciles to it."""

    worker_id: str
    hot_hashes: list[int]
    host_hashes: list[int]


@dataclass(slots=True)
class CostProfile:
    """Costs the worker measured at start: a prefill token, and copying one KV block out
    to / in from shared memory (or bytes, for inline transfers). The router compares them
    to choose transfer vs recompute."""

    prefill_s_per_token: float
    export_s_per_block: float
    import_s_per_block: float


@dataclass(frozen=True, slots=True)
class TenantShares:
    """The tenants' weights (fair queueing) and fixed HOT reservations (fractions of the
    tier; None: planned from demand) from now on: a config reload's."""

    weights: tuple[tuple[str, float], ...]
    static_shares: tuple[tuple[str, float], ...] | None


@dataclass(frozen=True, slots=True)
class ApplyForecast:
    """A forecast for a waiting session: the worker's cache policy may pin or prefetch."""

    forecast: object


@dataclass(frozen=True, slots=True)
class SessionMoved:
    """The router sent `session`'s latest request to another worker: this worker's cache
    policy need not keep the session's KV for a return here."""

    tenant: str
    session: str
