"""A budgeted tenant's open-ended request: how many tokens each of its runs may generate.

A request that sets no completion limit (chat without `max_tokens`/`max_completion_tokens`,
completions with `max_tokens: null`) would run to the context's end, which no reservation
made before it runs can pay for. For a tenant with a `token_budget` the backend caps each
of the request's runs at `run_share` of what the budget has left (`Limiters.budget_room`),
and reserves that: local models (gateway/local.py) and upstream models (gateway/upstream.py)
alike.

Invariant: `num_prompt_tokens_paid + num_runs * run_share(...) <= room` whenever `room`
leaves every run one token; the share is never below 1, so a request the budget cannot fit
reserves more than is left and is refused at admission (429 `insufficient_quota`), as one
with a `max_tokens` would be.
"""
from __future__ import annotations


def run_share(room: int, num_prompt_tokens_paid: int, num_runs: int) -> int:
    """The completion tokens each of `num_runs` runs may generate out of `room`, after the
    prompt tokens the request pays (`num_prompt_tokens_paid`: each prompt once on a local
    model, whose runs share a prefill; every upstream call's own prompt on an upstream
    model); at least 1."""
    return max(1, (room - num_prompt_tokens_paid) // max(1, num_runs))
