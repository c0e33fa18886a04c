"""A budgeted tenant's token budget at admission: how many tokens each run of an
open-ended request may generate, and what a request over the budget is told.

A request that sets no completion limit (chat without `max_tokens`/`max_completion_tokens`,
completions with `max_tokens: null`) would run to the context's end, which no reservation
made before it runs can pay for. For a tenant with a `token_budget` the backend caps each
of the request's runs at `run_share` of what the budget has left (`Limiters.budget_room`),
and reserves that: local models (gateway/local.py) and upstream models (gateway/upstream.py)
alike.

Invariants:
- `num_prompt_tokens_paid + num_runs * run_share(...) <= room` whenever `room` leaves every
  run one token; the share is never below 1, so a request the budget cannot fit reserves
  more than is left and is refused at admission (`budget_refusal`), as one with a
  `max_tokens` would be.
- `budget_refusal` is final (429 `insufficient_quota`, `x-should-retry: false`) only for a
  request that could not fit even were nothing in flight (spent + its tokens > budget):
  spent tokens never come back by waiting. One that fits once the requests still running
  settle (their reservations are trued up to what they used) is a 429 `rate_limit_exceeded`
  to retry after `IN_FLIGHT_RETRY_S` (QA97): so an open-ended request, which reserves its
  share of all that is left, makes the next one wait, not fail. Neither debits anything.
"""
from __future__ import annotations

from gateway.errors import ApiError, quota_exhausted, rate_limited

IN_FLIGHT_RETRY_S = 1   # the Retry-After of a request that fits once the requests in flight settle


def run_share(room: int, num_prompt_tokens_paid: int, num_runs: int) -> int:
    """The completion tokens each of `num_runs` runs may generate out of `room`, after the
    prompt tokens the request pays (`num_prompt_tokens_paid`: each prompt once on a local
    model, whose runs share a prefill; every upstream call's own prompt on an upstream
    model); at least 1."""
    return max(1, (room - num_prompt_tokens_paid) // max(1, num_runs))


def budget_refusal(tenant: str, token_budget: int, num_spent_tokens: int, num_reserved_tokens: int,
                   num_tokens: int) -> ApiError | None:
    """The 429 for a request of up to `num_tokens` tokens that the budget cannot take now
    (spent + reserved by requests in flight + `num_tokens` > `token_budget`); None if it can.
    Final only when what is spent alone leaves it no room; else retryable."""
    if num_spent_tokens + num_reserved_tokens + num_tokens <= token_budget:
        return None
    if num_spent_tokens + num_tokens <= token_budget:
        return rate_limited(
            f"The token budget of tenant '{tenant}' has room for this request (up to {num_tokens} tokens) only once "
            f"its requests in flight end: {num_spent_tokens} of {token_budget} tokens are spent and "
            f"{num_reserved_tokens} reserved by running requests. Retry shortly.", IN_FLIGHT_RETRY_S)
    left = max(0, token_budget - num_spent_tokens)
    in_flight = f"; {num_reserved_tokens} more are reserved by running requests" if num_reserved_tokens else ""
    if left == 0:
        return quota_exhausted(f"Tenant '{tenant}' has used its token budget ({num_spent_tokens} of "
                               f"{token_budget} tokens spent{in_flight}; this request needs up to {num_tokens}).")
    return quota_exhausted(f"This request may use up to {num_tokens} tokens, more than the {left} left of the token "
                           f"budget of tenant '{tenant}' ({num_spent_tokens} of {token_budget} spent{in_flight}).")
