"""A tenant's limits as refusals: which limit a request of a given size would break now,
as the OpenAI-shaped 429 to answer (a mixin of `TenantLimiter`, gateway/limits.py, whose
invariants these keep: the budget is checked first, then requests/minute, tokens/minute,
and the queue last; a batch line has no queue place to be refused by).

Invariant: a Batch API line spends only what the tenant's interactive requests leave: it
passes a per-minute limit only when, after it, the bucket still holds `BATCH_RESERVE_SHARE`
of the limit (`with_reserve`; a line that alone needs more than the rest, only when the
bucket is full), else it is a retryable 429 whose `Retry-After` is the wait until it does,
which the batch runner honours and sends it again (no result line, no 429 counted). The
reserve is the tenant's interactive requests', so its own batch never takes their rate
(QA153: rpm 30, a batch running, 7 of 10 of its agents' requests refused).
"""
from __future__ import annotations

import math

from gateway.batch_line_turn import BATCH_LINE
from gateway.budget_share import budget_refusal
from gateway.errors import ApiError, rate_limited
from gateway.token_buckets import TokenBucket

BATCH_RESERVE_SHARE = 0.5   # of each per-minute limit, kept for the tenant's interactive requests
BATCH_RESERVE_NOTE = " A batch request leaves half of each per-minute limit to the tenant's interactive requests."


def with_reserve(bucket: TokenBucket, amount: float) -> float:
    """What `bucket` must hold for a batch line to take `amount` of it: `amount` and the
    interactive reserve, at most the whole bucket (a line larger than the rest waits for a
    full one, so it can still run)."""
    return min(amount + BATCH_RESERVE_SHARE * bucket.capacity, bucket.capacity)


class TenantLimitRefusals:
    """`TenantLimiter`'s refusals: use its `tenant`, `limits`, `_clock`, `_requests`,
    `_tokens`, `num_spent_tokens`, `num_reserved_tokens`, `_waiters`, `num_batch_active`,
    `_has_free_slot` and `rate_limit_headers`."""

    __slots__ = ()

    def _check(self, num_tokens: int, is_batch_line: bool) -> ApiError | None:
        """The first limit `num_tokens` more would break, as an error; None if none (a
        batch line's turn for a slot is no limit: it takes no place in the queue; its
        per-minute limits keep the interactive reserve, `with_reserve`)."""
        limits = self.limits
        if limits.token_budget is not None:   # final only when the spent tokens alone leave no room
            error = budget_refusal(self.tenant, limits.token_budget, self.num_spent_tokens,
                                   self.num_reserved_tokens, num_tokens)
            if error is not None:
                return error
        now_s = self._clock()
        error = self._requests_refusal(now_s, is_batch_line)
        if error is not None:
            return error
        if self._tokens is not None:
            self._tokens.refill(now_s)
            wait_s = self._tokens.seconds_until(num_tokens)
            if wait_s is None:
                return ApiError(   # no wait makes it fit: no Retry-After (QA99), and never retry
                    429, f"Request too large for tenant '{self.tenant}': it may use {num_tokens} "
                    f"tokens, above the limit of {limits.tokens_per_minute} tokens per minute."
                    " The input or output tokens must be reduced in order to run successfully.",
                    "rate_limit_error", "rate_limit_exceeded", None, {"x-should-retry": "false"})
            if is_batch_line:
                wait_s = self._tokens.seconds_until(with_reserve(self._tokens, num_tokens))
            if wait_s > 0:
                return rate_limited(
                    f"Rate limit reached for tenant '{self.tenant}': {limits.tokens_per_minute} tokens per minute."
                    + (BATCH_RESERVE_NOTE if is_batch_line else ""), wait_s)   # the whole wait, debt included
        return None if is_batch_line else self._queue_refusal()

    def _requests_refusal(self, now_s: float, is_batch_line: bool = False) -> ApiError | None:
        """The requests/minute refusal, when the bucket has no whole request left (for a
        batch line: none beside the interactive reserve)."""
        if self._requests is None:
            return None
        self._requests.refill(now_s)
        wait_s = self._requests.seconds_until(with_reserve(self._requests, 1) if is_batch_line else 1)
        if wait_s is not None and wait_s <= 0:
            return None
        return rate_limited(
            f"Rate limit reached for tenant '{self.tenant}': "
            f"{self.limits.requests_per_minute} requests per minute." + (BATCH_RESERVE_NOTE if is_batch_line else ""),
            math.ceil(wait_s if wait_s is not None else 60))

    def _queue_refusal(self) -> ApiError | None:
        """The concurrency refusal, when every slot is busy and the queue is full."""
        limits = self.limits
        if self._has_free_slot() or len(self._waiters) < limits.max_queued + self.num_batch_active:
            return None
        return rate_limited(
            f"Too many concurrent requests for tenant '{self.tenant}' "
            f"(max {limits.max_concurrent} running, {limits.max_queued} queued).", 1)

    def early_refusal(self, max_num_tokens: int | None, is_batch_line: bool | None = None) -> ApiError | None:
        """The refusal `acquire` would answer now to any request of at most
        `max_num_tokens` tokens (None: unknown), decided without its token count, so a
        tenant over its requests/minute or its concurrency and queue can be refused before
        its prompt is rendered; None when there is none or it depends on the count (then
        `acquire` decides). Advisory only: it debits nothing, and it never refuses what
        `acquire` would admit, nor differently: the limits `_check` tests first (the
        budget, and tokens/minute before the queue) must be known to pass for any such
        request. Carries the rate limit headers, as `acquire`'s refusal does.
        `is_batch_line` as for `acquire` (a batch line has no queue to be refused by)."""
        limits = self.limits
        if limits.token_budget is not None and (
                max_num_tokens is None
                or self.num_spent_tokens + self.num_reserved_tokens + max_num_tokens > limits.token_budget):
            return None
        if is_batch_line is None:
            is_batch_line = BATCH_LINE.get() is not None
        now_s = self._clock()
        error = self._requests_refusal(now_s, is_batch_line)
        if error is None and not is_batch_line:
            error = self._queue_refusal()
            if error is not None and self._tokens is not None:
                self._tokens.refill(now_s)
                if max_num_tokens is None or self._tokens.seconds_until(max_num_tokens) != 0:
                    return None   # tokens/minute may refuse it first, with its own answer
        if error is not None:
            error.headers.update(self.rate_limit_headers())
        return error
