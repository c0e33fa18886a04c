"""When a worker runs prefill chunks, and which running requests ride them.

Part of `WorkerLoop` (shards/worker.py, whose docstring gives the whole schedule): the
prefills of tenants within their weighted share of the slots run back to back (time to
first token first), at most one chunk of a tenant past its share, or of a flex request
(after every default-tier prefill), runs between decode passes, and with
`max_decode_stall_s` set the due running requests decode in a chunk's own forward pass,
or the chunks yield to a decode pass (`shards.stall_bound`).

Invariants: a prefill that fails ends its request with one retryable error and frees
what it held; a request whose prefill finished is running before its first token is
sent; a failed packed pass changed no cache, so its chunk then runs alone.
"""
from __future__ import annotations

import traceback
from collections.abc import Callable

from cache.tiers import Tier
from shards.fair_queue import fair_share
from shards.prefill import PrefillTask
from shards.protocol import ErrorEvent


class PrefillScheduling:
    """The prefill half of `WorkerLoop`'s schedule (a mixin: it uses the loop's
    `prefilling`, `running`, `waiting`, `stall`, `prefill`, `prefill_order`, `runner` and
    its event methods)."""

    def _prefill(self, poll: Callable[[], None] | None) -> None:
        """Chunks back to back while the next task's tenant is within its share (time to
        first token first), then at most one chunk of a tenant past its share, then
        (after a poll) the within-share ones again: a newcomer never waits for a decode
        behind that chunk."""
        self._prefill_within_share(poll)
        if self.alive and not self._decode_overdue() and self._prefill_chunk(within_share_only=False):
            self._prefill_within_share(poll)

    def _prefill_within_share(self, poll: Callable[[], None] | None) -> None:
        while self.alive:
            if poll is not None:
                poll()
                self.admit_ready()
            if not self.alive or self._decode_overdue() or not self._prefill_chunk(within_share_only=True):
                return

    def _decode_overdue(self) -> bool:
        """Whether prefill chunks must yield to a decode pass (`StallBound.must_yield`)
        for a request that cannot ride them."""
        return not self._rides_chunks() and self.stall.must_yield(self.running.values(), self.clock())

    def _rides_chunks(self) -> bool:
        return self.config.decodes_ride_chunks and getattr(self.runner, "batches_decode", False)

    def _riders(self) -> list:
        """The running requests that decode in the next chunk's pass (`StallBound.riders`)."""
        if not self._rides_chunks():
            return []
        return self.stall.riders(self.running.values(), self.clock(), self.config.decode_batch)

    def _prefill_chunk(self, within_share_only: bool) -> bool:
        """One chunk of the prefill that comes first: the default tier's before flex
        requests' (`WorkItem.flex`), then in `prefill_order` (`shards.prefill_order`); a
        finished prefill starts decoding. False when no chunk ran, or, with
        `within_share_only`, when the first one is flex or its tenant past its share (so
        it interleaves with decode passes, one chunk at a time)."""
        if not self.prefilling:
            return False
        counts = self._slots_by_tenant()
        active = {t for t, n in counts.items() if n > 0} | set(self.waiting.tenants())
        past_share = {t: counts[t] > fair_share(t, active, self.weights, self.max_running_hard) for t in counts}

        def interleaved(task: PrefillTask) -> bool:
            return task.item.flex or past_share[task.item.tenant]

        def key(item: tuple[int, str]) -> tuple:
            index, request_id = item
            task = self.prefilling[request_id]
            tenant = task.item.tenant
            return (task.item.flex, *self.prefill_order.key(
                past_share=interleaved(task), slots_per_weight=counts[tenant] / self.waiting.weight(tenant),
                admitted_s=task.admitted_s, num_remaining_tokens=task.num_remaining_tokens, arrival_index=index))

        _, request_id = min(enumerate(self.prefilling), key=key)
        task = self.prefilling[request_id]
        if within_share_only and interleaved(task):
            return False
        try:
            token = self._advance(task)
        except Exception as exc:
            traceback.print_exc()
            del self.prefilling[request_id]
            self.prefill.abort(task)
            self._error(ErrorEvent(request_id, f"prefill failed: {exc}", "internal_error",
                                   retryable=True))
            return True
        if token is None:
            return True
        del self.prefilling[request_id]
        seq = task.seq
        self.running[request_id] = seq
        self._prefill_s[request_id] = task.compute_s
        self._after_token(seq, token)
        if request_id in self.running:
            self._commit_prompt(seq)
        return True

    def _commit_prompt(self, seq) -> None:
        """Commit the prompt's new full blocks to the prefix cache (`commit_prompt`) and
        note for the request's `FinishEvent` the prompt tokens that wrote there
        (`num_prompt_tokens_written`)."""
        num_held = len(getattr(seq, "block_ids", ()))
        self.runner.commit_prompt(seq)
        self._prompt_writes[seq.item.request_id] = num_prompt_tokens_written(self.runner, seq, num_held)

    def _advance(self, task: PrefillTask) -> int | None:
        """One chunk of `task`, with the due running requests (`_riders`) decoding in the
        same pass. If that pass fails (no cache changed), the chunk runs alone."""
        riders = self._riders() if task.seq.prompt_logprobs is None else []
        before_s, before_tokens = task.compute_s, task.num_done_tokens
        token = None
        if riders:
            try:
                token, results = self.prefill.advance_with(task, riders)
            except Exception:  # the packed pass failed, no cache changed: the chunk alone
                traceback.print_exc()
                riders = []
            else:
                self._deliver(riders, results)
                if isinstance(token, Exception):
                    raise token
        if not riders:
            token = self.prefill.advance(task)
        self.stall.chunk_done(task.compute_s - before_s, self.clock())
        if not riders:  # a chunk alone measures the prefill rate
            self.prefill_order.observe(task.num_done_tokens - before_tokens, task.compute_s - before_s)
        return token


def num_prompt_tokens_written(runner, seq, num_held: int) -> int:
    """The prompt tokens a commit of `seq`'s prompt wrote to the prefix cache, read right
    after it: the blocks past the `num_held` it held before, within its own prompt's full
    blocks (not output resumed from another worker), that the commit registered as new
    cached blocks. A block it found cached took a reference (`num_hits` > 0), a private
    one is not cached, and one it had no room for is not in `block_ids`; so with prefix
    caching off it is 0, and a last partial block never counts."""
    block_ids = getattr(seq, "block_ids", None)
    if not block_ids:   # NOTE: nothing held or committed (or a test runner without blocks)
        return 0
    block_size = runner.block_size
    num_prompt_blocks = seq.item.num_prompt_tokens // block_size
    num_new = 0
    for block_id in block_ids[num_held:num_prompt_blocks]:
        block = runner.blocks.block(Tier.HOT, block_id)
        if block is not None and block.is_cached and block.num_hits == 0:
            num_new += 1
    return num_new * block_size
