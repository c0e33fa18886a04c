"""Per-tenant admission: requests/minute, tokens/minute, concurrency, queue, budget.

Invariants:
- `TenantLimiter.acquire` checks every limit and debits them all in one synchronous step
  (no `await` in between), so on the single event loop concurrent requests cannot slip a
  burst past a limit: either all debits happen or none do.
- Tokens are reserved up front (prompt + completion allowance) and trued up on release
  with the real usage, so the tokens/minute bucket and the budget are never overspent by
  requests in flight; a request that used more than it reserved leaves the bucket in debt.
- `rate_limit_headers` reports the per-minute buckets as OpenAI's `x-ratelimit-*` headers
  (on every admitted response and on a refusal), so clients can pace themselves.
- At most `max_concurrent` tickets are active; waiters are served FIFO and a freed slot is
  handed straight to the next waiter, so no newcomer can jump the queue. A slot is free only
  while nobody waits.
- A Batch API line (`is_batch_line`; `BATCH_LINE`) never takes a place in the tenant's queue
  (`max_queued`, `num_queued` count interactive requests only) and never goes before an
  interactive request: it takes a slot at once only when one is free (so none waits), else
  waits apart, and a freed slot goes to the oldest interactive waiter, to a batch line only
  when none waits (QA124: a tenant's batch lines held its slots and queue, its agents were
  refused 429). It waits at most `queue_timeout_s`, then a retryable 429 sends it back. Each
  slot a batch line holds is one more queue place for the tenant's requests (its slot goes
  to them next), so a tenant's own batch never makes its agents' requests refused, also
  with no queue (`max_queued` 0).
- A batch line spends only what the tenant's interactive requests leave of its per-minute
  limits: it is admitted only when each bucket keeps half its limit after it (a line larger
  than the other half, only from a full bucket), else a retryable 429 sends it back until
  then (gateway/limit_refusals.py `with_reserve`; QA153). Interactive requests are checked
  as before, so the reserve is theirs.
- `release` gives the slot back on every path, even when what it is told was used is not a
  count (then the reservation is charged and it raises after), so no failure while
  accounting can lock a tenant out.
- `budget_room` is what a budgeted tenant's request that sets no `max_tokens` may reserve,
  and so generate (a local model caps the run at it): the budget holds for such a request
  as for one with `max_tokens`, which alone the budget cannot stop once it runs. A batch
  line's is at most what it may take of a full tokens/minute bucket beside the reserve.
- A request over the budget only because of what requests in flight reserved gets a
  retryable 429 at once (gateway/budget_share.py `budget_refusal`), never a place in the
  tenant's queue: the queue waits for a slot, and an open-ended request's reservation was
  sized from the room before admission, so it must be sized again when it retries.
- A refusal's `Retry-After` is the whole wait until the request fits (a tokens/minute
  bucket in debt included), at least 1 s: at most `x-ratelimit-reset-*` rounded up.
"""
from __future__ import annotations

import asyncio
import math
import numbers
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from gateway.batch_line_turn import BATCH_LINE, BatchLineTurn
from gateway.config import LimitsConfig
from gateway.errors import rate_limited
from gateway.limit_refusals import BATCH_RESERVE_SHARE, TenantLimitRefusals
from gateway.token_buckets import TokenBucket, duration_text, keeping_spent


@dataclass(slots=True)
class Ticket:
    """One admitted request. `release()` must be called exactly once (it is idempotent)."""

    tenant: str
    num_reserved_tokens: int
    holds_slot: bool = False
    is_released: bool = False
    is_batch_line: bool = False
    under_budget: bool = False   # admitted while the tenant had a `token_budget`


class TenantLimiter(TenantLimitRefusals):
    """The live limit state of one tenant; owned by the app, used on its event loop only."""

    __slots__ = ("tenant", "limits", "_clock", "_requests", "_tokens", "num_active", "_waiters", "_batch_waiters",
                 "num_batch_active", "num_spent_tokens", "num_reserved_tokens", "queue_timeout_s",
                 "num_spent_after_budget")

    def __init__(self, tenant: str, limits: LimitsConfig, *, queue_timeout_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.tenant = tenant
        self.queue_timeout_s = queue_timeout_s
        self._clock = clock
        self._requests: TokenBucket | None = None
        self._tokens: TokenBucket | None = None
        self._set_limits(limits)
        self.num_active = 0
        self.num_batch_active = 0   # of them, batch lines': each a queue place for the tenant's requests
        self._waiters: deque[asyncio.Future] = deque()   # interactive requests (the queue)
        self._batch_waiters: deque[asyncio.Future] = deque()   # batch lines, served after them
        self.num_spent_tokens = 0
        self.num_reserved_tokens = 0
        self.num_spent_after_budget = 0   # charged, once its budget was lifted, to requests admitted under it

    def _set_limits(self, limits: LimitsConfig) -> None:
        """`limits`, with per-minute buckets at their new sizes (`keeping_spent`)."""
        now_s = self._clock()
        self.limits = limits
        self._requests = keeping_spent(self._requests, limits.requests_per_minute, now_s)
        self._tokens = keeping_spent(self._tokens, limits.tokens_per_minute, now_s)

    def rate_limit_headers(self, not_yet_taken_tokens: int | None = None) -> dict[str, str]:
        """OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` for the tenant's
        per-minute limits as they stand now (none for a limit it does not have): the
        bucket's size, the whole units left in it (0 while in debt), and how long until it
        is full again. `not_yet_taken_tokens`: the answer's own request has not taken its
        share yet (a background run answered `queued` before it is admitted): the headers
        count it as taken, one request and that many tokens, as OpenAI's do."""
        headers: dict[str, str] = {}
        now_s = self._clock()
        own = {"requests": 0 if not_yet_taken_tokens is None else 1, "tokens": not_yet_taken_tokens or 0}
        for kind, bucket in (("requests", self._requests), ("tokens", self._tokens)):
            if bucket is None:
                continue
            bucket.refill(now_s)
            level = bucket.level - own[kind]
            headers[f"x-ratelimit-limit-{kind}"] = str(int(bucket.capacity))
            headers[f"x-ratelimit-remaining-{kind}"] = str(max(0, math.floor(level)))
            until_full_s = (bucket.capacity - level) / bucket.refill_per_s
            headers[f"x-ratelimit-reset-{kind}"] = duration_text(until_full_s)
        return headers

    def _has_free_slot(self) -> bool:
        return self.limits.max_concurrent is None or self.num_active < self.limits.max_concurrent

    @property
    def num_queued(self) -> int:
        """The interactive requests waiting for a slot (batch lines waiting are not)."""
        return len(self._waiters)

    @property
    def num_batch_waiting(self) -> int:
        return len(self._batch_waiters)

    def budget_room(self) -> int | None:
        """For a tenant with a `token_budget`, the most tokens one request may reserve now:
        what the budget has left (spent and in flight taken off, never below 0), and no more
        than its tokens/minute bucket holds now (so a request sized to it is admitted now,
        not refused until the bucket is full again: QA86); None for a tenant without a
        budget. A batch line's (sized in a `BATCH_LINE` context) is no more than what the
        interactive reserve leaves of a full bucket: it waits for that room, not sized to
        what is there now, which it could take only from a full bucket (`with_reserve`)."""
        if self.limits.token_budget is None:
            return None
        room = max(0, self.limits.token_budget - self.num_spent_tokens - self.num_reserved_tokens)
        if self._tokens is None:
            return room
        if BATCH_LINE.get() is not None:
            return min(room, int(self._tokens.capacity * (1 - BATCH_RESERVE_SHARE)))
        self._tokens.refill(self._clock())
        return min(room, max(0, int(self._tokens.level)))

    async def acquire(self, num_tokens: int, is_batch_line: bool | None = None) -> Ticket:
        """Admit a request that may use up to `num_tokens` tokens, or raise a 429 `ApiError`.

        Waits in the tenant's FIFO queue when all slots are busy and the queue has room; a
        batch line (`is_batch_line`; None: whether it is sent in a `BATCH_LINE` context)
        waits apart, whatever the queue holds, until no interactive request waits.
        """
        line = BATCH_LINE.get()
        if is_batch_line is None:
            is_batch_line = line is not None
        error = self._check(num_tokens, is_batch_line)
        if error is not None:
            error.headers.update(self.rate_limit_headers())
            raise error
        if self._requests is not None:
            self._requests.level -= 1
        if self._tokens is not None:
            self._tokens.level -= num_tokens
        self.num_reserved_tokens += num_tokens
        ticket = Ticket(self.tenant, num_tokens, is_batch_line=is_batch_line,
                        under_budget=self.limits.token_budget is not None)
        if self._has_free_slot():
            self.num_active += 1
            self._holding(ticket, line)
            return ticket
        waiter = asyncio.get_running_loop().create_future()
        waiters = self._batch_waiters if is_batch_line else self._waiters
        waiters.append(waiter)
        try:   # NOTE: not `wait_for`, which on Python 3.11 drops a cancel that comes as the slot arrives
            async with asyncio.timeout(self.queue_timeout_s):
                await asyncio.shield(waiter)
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                self._holding(ticket, None)   # the slot arrived just as we gave up (given back below)
            else:
                waiter.cancel()
                if waiter in waiters:
                    waiters.remove(waiter)
            self.release(ticket, num_used_tokens=0)
            if isinstance(exc, TimeoutError):
                where = "as a batch request, after its interactive ones," if is_batch_line else "in the queue"
                raise rate_limited(f"Tenant '{self.tenant}' waited {self.queue_timeout_s:.0f} s {where} "
                                   "without a free slot.", 1) from None
            raise
        self._holding(ticket, line)
        return ticket

    def take_request(self) -> None:
        """Take one request of `requests_per_minute` (nothing without that limit) for work
        that reserves no tokens and holds no slot (`POST /v1/responses/input_tokens`), or
        raise the 429 `acquire` would (with `Retry-After` and the rate limit headers),
        taking nothing."""
        error = self._requests_refusal(self._clock())
        if error is not None:
            error.headers.update(self.rate_limit_headers())
            raise error
        if self._requests is not None:
            self._requests.level -= 1

    def _holding(self, ticket: Ticket, line: BatchLineTurn | None) -> None:
        ticket.holds_slot = True
        if ticket.is_batch_line:
            self.num_batch_active += 1
        if line is not None:
            line.is_admitted = True

    def release(self, ticket: Ticket, num_used_tokens: int | None) -> None:
        """Free the ticket's slot and true up its token reservation with real usage.

        `num_used_tokens=None` (usage unknown) charges the whole reservation. The slot
        and the reservation are given back whatever else happens: a `num_used_tokens`
        that is not a non-negative integer (a caller's bug) charges the whole reservation
        too, then raises `ValueError`, so the request fails loudly but the tenant is
        neither locked out nor refunded.
        """
        if ticket.is_released:
            return
        ticket.is_released = True
        held_slot, ticket.holds_slot = ticket.holds_slot, False
        try:
            self.num_reserved_tokens -= ticket.num_reserved_tokens
            is_count = (isinstance(num_used_tokens, numbers.Integral) and not isinstance(num_used_tokens, bool)
                        and num_used_tokens >= 0)
            used = int(num_used_tokens) if is_count else ticket.num_reserved_tokens
            self.num_spent_tokens += used
            if ticket.under_budget and self.limits.token_budget is None:   # its budget lifted while it ran
                self.num_spent_after_budget += used
            if self._tokens is not None:
                self._tokens.level += ticket.num_reserved_tokens - used
            if used == 0 and self._requests is not None and not held_slot:
                self._requests.level += 1   # never ran: give the request back
            if num_used_tokens is not None and not is_count:
                raise ValueError(f"tenant {self.tenant!r}: used tokens {num_used_tokens!r:.40} are not a "
                                 "non-negative integer; charged the reservation")
        finally:
            if held_slot:
                if ticket.is_batch_line:
                    self.num_batch_active -= 1
                self._hand_over_slot()

    def retune(self, limits: LimitsConfig) -> None:
        """Apply new `limits` (a config reload), keeping what is running, queued and
        spent: the per-minute buckets keep what the tenant spent in the window
        (`keeping_spent`: a reload refills nothing, a raised limit adds its room at once),
        and waiters a raised `max_concurrent` makes room for are admitted. (A
        `token_budget` the tenant did not have starts from the tokens on file, not from
        `num_spent_tokens`: `Limiters.update` sets that first.)"""
        if limits == self.limits:
            return
        self._set_limits(limits)
        self._admit_waiters()

    def _hand_over_slot(self) -> None:
        """A slot was freed: the next waiter takes it, unless a reload lowered
        `max_concurrent` below what is running."""
        self.num_active -= 1
        self._admit_waiters()

    def _admit_waiters(self) -> None:
        """Give free slots to the waiters, oldest first, interactive requests before batch
        lines (one that gave up is skipped)."""
        while (self._waiters or self._batch_waiters) and self._has_free_slot():
            waiter = (self._waiters or self._batch_waiters).popleft()
            if not waiter.done():
                self.num_active += 1
                waiter.set_result(None)

