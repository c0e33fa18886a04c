"""Chunked prefill: a prompt's uncached suffix is computed a chunk at a time.

The worker loop runs one chunk between two decodes and polls its inbox in between, so
a newcomer waits for at most one chunk (not a whole long prompt of another tenant)
before its own prefill starts: this is what bounds one tenant's effect on another's
time to first token. The result equals a one-pass prefill (causal attention over the
cached tokens plus the chunk; tested against `ModelRunner.start`). Running requests may
decode in a chunk's forward pass (`advance_with`, shards.batched_decode). A request for
prompt log probabilities computes its whole prompt, keeping every row's logits, and
runs its chunks alone.

Invariant: a task holds block references from `begin` on; on every path they end up
either in the running sequence (`advance` returned the first token) or released
(`abort`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from shards.detokenizer import Detokenizer
from shards.model_runner import RunningSequence
from shards.protocol import WorkItem
from shards.sampling import make_generator, token_logprob
from shards.worker_config import DEFAULT_CHUNK_TOKENS


@dataclass(slots=True)
class PrefillTask:
    seq: RunningSequence
    num_done_tokens: int  # prompt tokens whose KV is in seq.cache (cached prefix included)
    compute_s: float = 0.0  # model time spent on the chunks so far (with any decodes riding them)
    admitted_s: float = 0.0  # on the worker loop's clock (`shards.prefill_order`)

    @property
    def item(self) -> WorkItem:
        return self.seq.item

    @property
    def num_remaining_tokens(self) -> int:
        return len(self.seq.item.prompt_token_ids) - self.num_done_tokens


class ChunkedPrefill:
    def __init__(self, runner, tokenizer, chunk_tokens: int = DEFAULT_CHUNK_TOKENS) -> None:
        if chunk_tokens <= 0:
            raise ValueError(f"chunk_tokens must be positive, got {chunk_tokens}")
        self.runner = runner
        self.tokenizer = tokenizer
        self.chunk_tokens = chunk_tokens

    def begin(self, item: WorkItem) -> PrefillTask:
        """Take references on the cached prefix; no model pass yet. A request for prompt
        log probabilities reuses nothing: every prompt position's logits are needed."""
        scores_prompt = item.sampling.prompt_logprobs is not None
        if scores_prompt:
            cache, block_ids, num_cached = None, [], 0
        else:
            hit = self.runner.reuse_prefix(item.tenant, item.session, item.prompt_token_ids, background=item.flex)
            cache, block_ids, num_cached = hit.cache, list(hit.block_ids), hit.num_cached_tokens
        seq = RunningSequence(
            item=item, detokenizer=Detokenizer(self.tokenizer, tuple(item.sampling.stop)),
            generator=make_generator(item.sampling, self.runner.device), cache=cache, block_ids=block_ids,
            num_cached_tokens=num_cached, started_s=time.perf_counter(),
            prompt_logprobs=[] if scores_prompt else None)
        return PrefillTask(seq, num_cached)

    def advance(self, task: PrefillTask, max_tokens: int | None = None) -> int | None:
        """Compute the next chunk (at most `max_tokens`, default `chunk_tokens`); the
        first sampled token once the prompt is done."""
        seq = task.seq
        prompt = seq.item.prompt_token_ids
        end = min(len(prompt), task.num_done_tokens + (max_tokens or self.chunk_tokens))
        started = time.perf_counter()
        scores = seq.prompt_logprobs
        logits, seq.cache = self.runner.forward(prompt[task.num_done_tokens:end], seq.cache,
                                                task.num_done_tokens, logits_to_keep=0 if scores is not None else 1)
        if scores is not None:  # row j predicts prompt token num_done + j + 1
            num_top = seq.item.sampling.prompt_logprobs
            for row, token in enumerate(prompt[task.num_done_tokens + 1:end + 1]):
                scores.append(token_logprob(logits[0, row], token, num_top))
        return self._chunk_done(task, end, logits[0, -1], started)

    def advance_with(self, task: PrefillTask, riders: list[RunningSequence]
                     ) -> tuple[int | None | Exception, list[int | Exception]]:
        """`advance` by one chunk with one decode step of each running sequence in
        `riders` in the same forward pass. Raises only when that pass failed, with no
        cache changed. Otherwise returns what `advance` would (or the exception sampling
        the first token raised) and each rider's token (or its sampling's exception), so
        no rider's token is lost to another's failure."""
        seq = task.seq
        prompt = seq.item.prompt_token_ids
        end = min(len(prompt), task.num_done_tokens + self.chunk_tokens)
        started = time.perf_counter()
        last, seq.cache, results = self.runner.step_with_chunk(prompt[task.num_done_tokens:end], seq.cache, riders)
        try:
            token = self._chunk_done(task, end, last, started)
        except Exception as exc:
            token = exc
        return token, results

    def _chunk_done(self, task: PrefillTask, end: int, last_logits, started_s: float) -> int | None:
        seq = task.seq
        self.runner.synchronize()
        task.compute_s += time.perf_counter() - started_s
        task.num_done_tokens = end
        if end < len(seq.item.prompt_token_ids):
            return None
        token = seq.sample(last_logits)
        seq.first_token_s = time.perf_counter()
        return token

    def abort(self, task: PrefillTask) -> None:
        self.runner.release(task.seq)
