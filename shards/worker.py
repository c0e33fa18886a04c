"""A model worker's scheduling loop: one model, one tokenizer, one prefix cache.

Waiting requests sit in a weighted fair queue across tenants, flex requests
(`WorkItem.flex`) in a tier of their own served after the default tier's
(`shards.tiered_queue`); a request is admitted
while slots are free, or past `max_running` (up to `max_running_hard`) when its tenant
holds less than its weighted share of the slots, so one tenant's burst cannot hold
every slot against the others. An admitted request is prefilled in chunks
(`shards.prefill`), in `prefill_order` (`shards.prefill_order`: by default shortest
remaining prefill first, with aging; tenants past their share last). Each
`step` decodes one token for every running request, up to `decode_batch` of them in one
forward pass (`shards.batched_decode`); before each pass it polls the inbox, admits
newcomers, runs the prefills of tenants within their weighted share of
`max_running_hard` back to back (polling between chunks) and at most one chunk of the
rest. So a newcomer waits for at most one decode pass or chunk before its prefill starts and
then runs to its first token (prefill first, as time to first token is what a waiting
agent feels), while only a tenant past its share interleaves its prefills with decodes.
With `max_decode_stall_s` set, a running request is decoded before its wait for the
next token passes that bound (`shards.stall_bound`), at the newcomers' expense. It rides
a chunk's forward pass (`decodes_ride_chunks`, the default; up to `decode_batch` such
requests per chunk, which costs the chunk their tokens' compute, not another pass over
the weights); for models that cannot batch decodes, or with riding off, the chunks yield
to a whole decode pass instead.

Invariants: every request gets exactly one terminal event (FinishEvent or ErrorEvent);
its block references are released on every path (finish, stop, cancel, error), so
blocks are never leaked. Cache events are flushed before any terminal event on the same
ordered channel, so when the router sees a request end, its index already knows the
blocks that request stored.
"""
from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable

from cache.repeated_failures import RepeatedFailures
from cache.tiers import Tier
from shards.detokenizer import Detokenizer
from shards.fair_queue import may_admit, may_pin, pinned_blocks
from shards.prefill import ChunkedPrefill, PrefillTask
from shards.prefill_order import PrefillOrder
from shards.protocol import (CacheEventsReport, CacheSnapshot, ErrorEvent, EventBatch, FinishEvent, TokenEvent,
                             WorkItem)
from shards.stall_bound import StallBound
from shards.tiered_queue import TieredQueue
from shards.worker_config import WorkerConfig, stats_as_dict
from shards.worker_inbox import WorkerInbox
from shards.worker_prefill import PrefillScheduling

__all__ = ["WorkerConfig", "WorkerLoop", "stats_as_dict"]


class WorkerLoop(WorkerInbox, PrefillScheduling):
    """The scheduling loop, separate from process plumbing so tests can drive it."""

    def __init__(self, worker_id: str, config: WorkerConfig, runner, tokenizer, emit,
                 clock: Callable[[], float] = time.monotonic, prefill=None, batched: bool = False):
        """`emit` sends one message to the engine; with `batched` (and the config's
        `event_batches`), a decode pass's messages go to it as one `EventBatch`."""
        self.worker_id = worker_id
        self.config = config
        self.runner = runner
        self.tokenizer = tokenizer
        self._send = emit
        self._outbox: list | None = None   # a pass's messages, while they are gathered
        self._batches = batched and config.event_batches
        self.clock = clock
        self.weights = dict(config.tenant_weights)
        self.waiting: TieredQueue[WorkItem] = TieredQueue(self.weights)
        self.running: dict[str, object] = {}
        self.prefilling: dict[str, PrefillTask] = {}
        self._prefill_s: dict[str, float] = {}  # running request -> its prefill compute time
        self._prompt_writes: dict[str, int] = {}  # committed request -> prompt tokens it wrote to the cache
        self.stall = StallBound(config.max_decode_stall_s)
        self.prefill_order = PrefillOrder(config.prefill_order)
        self.prefill = prefill or ChunkedPrefill(runner, tokenizer, config.prefill_chunk_tokens)
        self.max_context = runner.loaded.max_context_tokens
        self.max_running_hard = config.max_running_hard or 4 * config.max_running
        self.alive = True
        self._last_events_s = 0.0
        self._last_snapshot_s = clock()
        self.transfer_failures = RepeatedFailures(logging.getLogger("stepahead.shards"))   # prefix copies'

    def emit(self, message) -> None:
        if self._outbox is None:
            self._send(message)
        else:
            self._outbox.append(message)

    def _finish_event(self, seq, reason: str) -> None:
        self.flush_cache_events()
        self.emit(FinishEvent(
            seq.item.request_id, reason, seq.item.num_prompt_tokens,
            min(seq.num_cached_tokens, seq.item.num_prompt_tokens), len(seq.output_ids),
            max(0.0, seq.first_token_s - seq.started_s), self.worker_id, self._prefill_s.pop(seq.item.request_id, 0.0),
            self._prompt_writes.pop(seq.item.request_id, 0)))

    def _error(self, event: ErrorEvent) -> None:
        self.flush_cache_events()
        self.emit(event)

    # --- cache reports -------------------------------------------------------------
    def flush_cache_events(self) -> None:
        events = self.runner.blocks.take_events()
        if events:
            self.emit(CacheEventsReport(self.worker_id, events))

    def housekeeping(self) -> None:
        """Periodic, off the request path: report cache events (rate-limited), a full
        snapshot for reconciliation, and let the cache policy act on time passing."""
        now = self.clock()
        if now - self._last_events_s >= self.config.events_interval_s:
            self._last_events_s = now
            self.runner.blocks.tick()
            self.flush_cache_events()
        if now - self._last_snapshot_s >= self.config.snapshot_interval_s:
            self._last_snapshot_s = now
            self.flush_cache_events()
            blocks = self.runner.blocks
            self.emit(CacheSnapshot(
                self.worker_id,
                [b.hash for b in blocks.blocks(Tier.HOT) if b.is_cached],
                [b.hash for b in blocks.blocks(Tier.HOST) if b.is_cached]))

    # --- scheduling -----------------------------------------------------------------
    def has_work(self) -> bool:
        return bool(len(self.waiting) or self.running or self.prefilling)

    @property
    def num_active(self) -> int:
        return len(self.running) + len(self.prefilling)

    def _slots_by_tenant(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for seq in [*self.running.values(), *(t.seq for t in self.prefilling.values())]:
            counts[seq.item.tenant] = counts.get(seq.item.tenant, 0) + 1
        return counts

    def _pinned_by_tenant(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for seq in [*self.running.values(), *(t.seq for t in self.prefilling.values())]:
            counts[seq.item.tenant] = counts.get(seq.item.tenant, 0) + self._num_blocks(seq.item)
        return counts

    def _num_blocks(self, item: WorkItem) -> int:
        return pinned_blocks(len(item.prompt_token_ids), self.config.block_size)

    def admit_ready(self) -> None:
        """Admit waiting requests, the default tier's before the flex tier's, each in fair
        order, while the slot rule (`may_admit`) and the KV rule (`may_pin`, on the head
        of each tenant's queue) allow."""
        capacity = self.config.num_hot_blocks
        while len(self.waiting):
            counts = self._slots_by_tenant()
            pinned = self._pinned_by_tenant()
            waiting = set(self.waiting.tenants())
            item = self.waiting.pop_first(lambda tenant, head: may_admit(
                tenant, counts, waiting, self.weights, self.config.max_running, self.max_running_hard)
                and may_pin(tenant, self._num_blocks(head), pinned, waiting, self.weights, capacity))
            if item is None:
                return
            self._admit(item)

    def step(self, poll: Callable[[], None] | None = None) -> None:
        """One decode for each running request, `decode_batch` requests per forward pass;
        before each pass (and once when none runs) poll the inbox (`poll`), admit what may
        run and prefill (`_prefill`)."""
        self.admit_ready()
        self._prefill(poll)
        pending = list(self.running)
        size = max(1, self.config.decode_batch)
        while pending:
            if poll is not None:
                poll()
                if not self.alive:
                    return
                self.admit_ready()
                self._prefill(poll)
            if not self.alive:
                return
            batch = [self.running[r] for r in pending[:size] if r in self.running]
            del pending[:size]
            if batch:
                self._decode(batch)

    def _decode(self, batch: list) -> None:
        """One token for each sequence of `batch`. When a batched pass fails (the runner
        restores the caches), each sequence is retried alone, so only a sequence that
        fails by itself gets an error."""
        try:
            results = self.runner.step_many(batch)
        except Exception as exc:  # a failed request must not take the worker down
            if len(batch) > 1:
                for seq in batch:
                    self._decode([seq])
                return
            self._fail_running(batch[0], exc)
            return
        self._deliver(batch, results)

    def _deliver(self, seqs: list, results: list) -> None:
        """Each sequence's new token, or the end of it when its step failed alone (the
        messages sent as one batch, when batched)."""
        self._outbox = [] if self._batches and len(seqs) > 1 else None
        try:
            for seq, result in zip(seqs, results):
                if isinstance(result, Exception):
                    self._fail_running(seq, result)
                else:
                    self._after_token(seq, result)
        finally:
            outbox, self._outbox = self._outbox, None
            if outbox:
                self._send(outbox[0] if len(outbox) == 1 else EventBatch(outbox))

    def _fail_running(self, seq, exc: Exception) -> None:
        """End a running request whose generation failed: release it, report the error."""
        self.running.pop(seq.item.request_id, None)
        self._prefill_s.pop(seq.item.request_id, None)
        self._prompt_writes.pop(seq.item.request_id, None)
        self.runner.release(seq)
        self._error(ErrorEvent(seq.item.request_id, f"generation failed: {exc}", "internal_error"))

    def _admit(self, item: WorkItem) -> None:
        if not item.prompt_token_ids:
            self._error(ErrorEvent(item.request_id, "the prompt is empty", "invalid_prompt"))
            return
        if item.num_resumed_tokens and self._ended_before_it_was_cut(item):
            return
        if len(item.prompt_token_ids) >= self.max_context:
            self._error(ErrorEvent(
                item.request_id, f"the prompt has {len(item.prompt_token_ids)} tokens; this model's "
                f"context length is {self.max_context}", "context_length_exceeded"))
            return
        try:
            task = self.prefill.begin(item)
            task.admitted_s = self.clock()
            self.prefilling[item.request_id] = task
        except Exception as exc:
            traceback.print_exc()
            self._error(ErrorEvent(item.request_id, f"prefill failed: {exc}", "internal_error",
                                   retryable=True))

    def _ended_before_it_was_cut(self, item: WorkItem) -> bool:
        """A resumed stream whose worker died after its last token but before its end:
        it ends here as it would have there ("stop" after a stop string, "length" at
        `max_tokens` or the context's end), with the text held back till then; whether so."""
        detokenizer = Detokenizer(self.tokenizer, tuple(item.sampling.stop))
        detokenizer.resume(item.prompt_token_ids[item.num_prompt_tokens:], item.num_resumed_chars)
        if detokenizer.stopped:
            reason = "stop"
        elif item.num_resumed_tokens >= item.sampling.max_tokens or len(item.prompt_token_ids) >= self.max_context:
            reason = "length"
        else:
            return False
        rest = detokenizer.flush()
        if detokenizer.stopped:   # the text held back till the end completed a stop string
            reason = "stop"
        if rest:
            self.emit(TokenEvent(item.request_id, [], rest))
        self.emit(FinishEvent(item.request_id, reason, item.num_prompt_tokens, 0, item.num_resumed_tokens,
                              0.0, self.worker_id))
        return True

    def _after_token(self, seq, token: int) -> None:
        seq.last_token_s = self.clock()
        params = seq.item.sampling
        stop_token = self.runner.is_stop_token(token, params)
        delta = "" if stop_token else seq.detokenizer.push(token)
        ids = [] if stop_token else [token]
        num_out = len(seq.output_ids) - (1 if stop_token else 0)
        out_of_room = seq.num_kv_tokens + 1 >= self.max_context
        done_reason = None
        if stop_token or seq.detokenizer.stopped:
            done_reason = "stop"
        elif num_out >= params.max_tokens or out_of_room:
            done_reason = "length"
        if done_reason is not None and not seq.detokenizer.stopped:
            delta += seq.detokenizer.flush()
            if seq.detokenizer.stopped:   # the text held back till the end completed a stop string
                done_reason = "stop"
        prompt_scores, seq.prompt_logprobs = seq.prompt_logprobs, None
        if ids or delta or prompt_scores is not None:
            scored = seq.output_logprobs[-1:] if ids and seq.output_logprobs else None
            first_here = len(seq.output_ids) == seq.item.num_resumed_tokens + 1
            cached = min(seq.num_cached_tokens, seq.item.num_prompt_tokens) if first_here else None
            self.emit(TokenEvent(seq.item.request_id, ids, delta, scored, prompt_scores, cached,
                                 self.worker_id if first_here else None))
        if done_reason is not None:
            if stop_token:
                seq.output_ids.pop()
            self.running.pop(seq.item.request_id, None)
            if seq.item.request_id not in self._prompt_writes:   # it ends at its first token
                self._commit_prompt(seq)
            self.runner.finish(seq)
            self._finish_event(seq, done_reason)
