"""What the HTTP layer needs from a model, local or upstream.

A backend turns a validated request into a stream of `ChatEvent`s. Invariants:
- `prepare_*` does all checking that can fail on the client's input (tools, context
  length, unsupported options) before anything is admitted or streamed, so those
  failures are plain HTTP errors;
- the event stream is zero or more `TextDelta`/`ToolCallDelta`/`RefusalDelta`, then
  exactly one `Finished`; a failure raises `ApiError` from the iterator instead;
- closing the iterator early (client gone) cancels the work and frees its resources.
"""
from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.schemas import ChatCompletionRequest, CompletionRequest
from gateway.worker_runs import WorkerRun, WorkerRuns


@dataclass(slots=True)
class Usage:
    """Token counts of a reply. `completion_tokens_details` is the breakdown an upstream
    sent (`reasoning_tokens`, ...: non-negative integers), None when the backend has none
    (local models do not reason apart). `num_cache_write_tokens`: the prompt tokens the
    reply wrote to a prompt cache, an upstream's own count (0 when it sent none) or a local
    model's worker's (`shards.protocol.FinishEvent.num_cache_write_tokens`: the new full
    blocks of the prompt it registered in its prefix cache; 0 with prefix caching off);
    None where no count is known (a reply cut short before its worker finished), which
    `cache_write_tokens` reports as 0."""

    num_prompt_tokens: int = 0
    num_completion_tokens: int = 0
    num_cached_tokens: int = 0
    completion_tokens_details: dict[str, int] | None = None
    num_cache_write_tokens: int | None = None

    @property
    def cache_write_tokens(self) -> int:
        """The prompt tokens written to a cache, as counted (`num_cache_write_tokens`);
        0 where no count is known: never more than was written."""
        return self.num_cache_write_tokens or 0

    @property
    def num_total_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_completion_tokens

    @property
    def num_reasoning_tokens(self) -> int:
        return (self.completion_tokens_details or {}).get("reasoning_tokens", 0)

    def to_openai(self) -> dict:
        usage = {"prompt_tokens": self.num_prompt_tokens,
                 "completion_tokens": self.num_completion_tokens,
                 "total_tokens": self.num_total_tokens,
                 "prompt_tokens_details": {"cached_tokens": self.num_cached_tokens}}
        if self.completion_tokens_details is not None:
            usage["completion_tokens_details"] = dict(self.completion_tokens_details)
        return usage


@dataclass(frozen=True, slots=True)
class TokenChoice:
    """One generated token as text and exact bytes (`gateway.token_text`), its log
    probability, and the likeliest tokens as (text, bytes, log probability), likeliest
    first."""

    token: str
    token_bytes: bytes
    logprob: float | None  # None: a prompt's first token (completions' echo)
    top: tuple[tuple[str, bytes, float], ...] = ()


@dataclass(slots=True)
class TextDelta:
    text: str
    logprobs: list[TokenChoice] | None = None  # of the tokens behind `text`, when asked
    choice: int = 0  # which of the request's `n` choices (gateway.choices)


@dataclass(slots=True)
class ToolCallDelta:
    """A piece of tool call `index`; `id` and `name` come with its first piece (an upstream
    that splits the name sends the rest in later pieces: joined, they are the name)."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    choice: int = 0


@dataclass(slots=True)
class RefusalDelta:
    """A piece of the model's refusal (OpenAI's `message.refusal`, `delta.refusal`, a
    Responses `refusal` content part): text that is not the answer but says why there
    is none. Only upstream models send them."""

    refusal: str
    choice: int = 0


@dataclass(slots=True)
class Finished:
    """A choice's end. `system_fingerprint` and `service_tier` are what an upstream said
    of its reply (None when it said nothing, and for local models). `pays_own_prompt`: the
    choice was a call of its own that paid its whole prompt (an upstream model's, one of
    `n` > 1, as `gateway.choices` marks them), so a merged usage counts its prompt too.
    `ended_at`: when it was made (wall clock; not compared), a Responses reply's
    `completed_at` in every copy of it, the stored one and the answer alike."""

    finish_reason: str
    usage: Usage
    worker: str = "upstream"
    ttft_s: float | None = None
    choice: int = 0
    system_fingerprint: str | None = None
    service_tier: str | None = None
    pays_own_prompt: bool = False
    ended_at: float = field(default_factory=time.time, compare=False)
    # a local run resumed mid-stream on another worker: its workers in order, `worker` first,
    # with the tokens each generated (gateway/worker_runs.py), as its metrics credit them; () on one
    worker_runs: tuple = ()


ChatEvent = TextDelta | ToolCallDelta | RefusalDelta | Finished


@dataclass(slots=True)
class GeneratedTokens:
    """What a request's local runs did, for a reply cut short (its client left), which has
    no usage: the tokens they generated, as the reply read them (`num`, added as each run
    ends, its cut ones too) and as the engine queued them for it (`num_sent`: those read
    and those still waiting unread when the reply stopped reading, `LocalEngine.num_generated`;
    at least `num` where every run adds to both), `num_generated` the larger; the worker
    the first run to start ran on, and the prompt tokens each prompt's first run found
    cached, summed as `merged_usage` counts them (both from a run's first event; None
    before any); the workers each local run ran on (`follow`: several once resumed
    mid-stream on another worker). One object for the copies of a request's `Prepared`
    (its choices' runs)."""
    num: int = 0
    worker: str | None = None
    num_cached_tokens: int | None = None
    num_sent: int = 0
    runs: list[WorkerRuns] = field(default_factory=list)

    def follow(self, runs: WorkerRuns) -> None:
        """A local run's workers, followed as its events are read (gateway/local_generation.py)."""
        self.runs.append(runs)

    def resumed_runs(self) -> tuple[WorkerRun, ...]:
        """When a run was resumed mid-stream on another worker: every run's workers in
        order with the tokens read from each, as /metrics credits a reply cut short (the
        last one takes the rest: tokens generated unread); () when none was (QA169)."""
        if not any(len(followed.runs) > 1 for followed in self.runs):
            return ()
        return tuple(WorkerRun(run.worker, run.num_output_tokens) for followed in self.runs for run in followed.runs)

    @property
    def num_generated(self) -> int:
        """The tokens the workers generated for the request, read by its reply or not."""
        return max(self.num, self.num_sent)

    def run_started(self, worker: str, num_cached_tokens: int, *, is_prompt_head: bool) -> None:
        """A run's first event: `worker` it runs on, `num_cached_tokens` of its prompt found
        cached; `is_prompt_head`: the run is its prompt's first choice."""
        if self.worker is None:
            self.worker = worker
        if is_prompt_head:
            self.num_cached_tokens = (self.num_cached_tokens or 0) + num_cached_tokens


@dataclass(slots=True)
class Prepared:
    """A request that passed every input check and is ready to run.

    `num_reserved_tokens` is what the tenant's token limits are charged up front.
    `payload` is backend-private (rendered token ids, litellm kwargs, ...).
    `num_choices` is the request's `n`; a backend runs one choice per `run`, the one in
    `choice`, and offsets a given seed by it so that seeded choices differ
    (`gateway.choices` fans the request out). A backend that scores its choices sets
    `best_of` (completions' `best_of` > 1): then `num_choices` = max(n, best_of)
    candidates run, the reply keeps the `num_returned` (= n) likeliest per token, and
    their token log probabilities only when `keep_logprobs` (the client asked for them).
    `prompt_token_ids` is the prompt as the model reads it, when the backend tokenizes it
    (local models, one prompt); tracing records its block fingerprints, never the ids.
    A completions request with several prompts has `num_prompts` > 1 and a payload per
    prompt: its runs come in one group of `num_choices // num_prompts` per prompt, and
    choice c belongs to prompt c // that, as OpenAI numbers the choices.
    """

    request_id: str
    tenant: str
    model: str
    num_prompt_tokens: int
    num_reserved_tokens: int
    payload: Any = None
    tool_names: frozenset[str] = field(default_factory=frozenset)
    num_choices: int = 1
    choice: int = 0
    best_of: int = 1
    num_returned: int = 1
    keep_logprobs: bool = True
    num_prompts: int = 1
    prompt_token_ids: Sequence[int] | None = None
    service_tier: str | None = None   # the tier a local model serves it in, as the reply names it
    prompt_is_counted: bool = True   # `num_prompt_tokens` is the model's count, not an estimate (upstream)
    generated: GeneratedTokens = field(default_factory=GeneratedTokens)   # shared by its runs' copies

    @property
    def num_per_prompt(self) -> int:
        """Runs per prompt (`n`, or `best_of` candidates)."""
        return self.num_choices // self.num_prompts

    @property
    def is_prompt_head(self) -> bool:
        """This run is its prompt's first choice (the one whose prompt usage counts)."""
        return self.choice % self.num_per_prompt == 0

    def usage_so_far(self) -> Usage:
        """The usage of a request cut short, which has none of its own, as far as it is
        known: the prompt (0 where `num_prompt_tokens` is an upstream's estimate), the
        tokens its local runs generated (`GeneratedTokens.num_generated`: those its reply
        never read too, the worker did them) and the prompt tokens they found cached (0
        before any run's first event). What its tenant is charged, and its traced step,
        its metrics and a cancelled background response say it used."""
        generated = self.generated
        return Usage(num_prompt_tokens=self.num_prompt_tokens if self.prompt_is_counted else 0,
                     num_completion_tokens=generated.num_generated,
                     num_cached_tokens=generated.num_cached_tokens or 0)


class WithoutWorkers:
    """What a backend with no worker processes of its own reports: no workers, no
    router, no prompt token cache, no prefix cache for its choices to share (an upstream
    model, a local embedding model)."""

    def worker_metrics(self) -> list[dict]:
        return []

    def router_metrics(self) -> dict:
        return {}

    def prompt_token_metrics(self) -> dict:
        return {}

    @property
    def starts_choices_at_once(self) -> bool:
        """A request's `n` choices all start at once (`gateway.choices.run_choices`): with no
        engine of its own there is no prefix cache for choice 0 to fill for the others (an
        upstream model's choices are calls of their own, each billed its whole prompt), so
        holding them back until choice 0's first event would only add its latency to theirs.
        A backend without this property (a local engine's) staggers them."""
        return True


class Backend(Protocol):
    model_id: str
    owned_by: str

    async def start(self) -> None: ...

    def cancel_start(self) -> None:
        """Make a `start` in progress end soon with shards.transport.StartCancelled,
        having stopped what it began; nothing once started (or when it cannot stop)."""

    async def stop(self) -> None: ...

    async def prepare_chat(self, request: ChatCompletionRequest, tenant: str,
                           request_id: str) -> Prepared: ...

    async def prepare_completion(self, request: CompletionRequest, tenant: str,
                                 request_id: str) -> Prepared: ...

    def run(self, prepared: Prepared) -> AsyncIterator[ChatEvent]: ...

    def health(self) -> dict: ...

    def worker_metrics(self) -> list[dict]: ...

    def router_metrics(self) -> dict: ...

    def prompt_token_metrics(self) -> dict:
        """The prompt token cache's counts (gateway/prompt_token_cache.py); {} without one."""
