"""Folding a worker's measured costs into the router's model of it (`WorkerCosts`). Pure.

Invariant: a cost stays None until its first sample, then is an exponentially weighted
mean of the samples (weight `COST_EWMA` on the newest); a sample of no units is ignored.
"""
from __future__ import annotations

from shards.route_records import WorkerCosts

COST_EWMA = 0.3


def fold_cost(costs: WorkerCosts, name: str, elapsed_s: float, num_units: int) -> None:
    """Fold `elapsed_s` over `num_units` (blocks or tokens) into `costs.<name>`."""
    if num_units <= 0:
        return
    sample = elapsed_s / num_units
    old = getattr(costs, name)
    setattr(costs, name, sample if old is None else (1 - COST_EWMA) * old + COST_EWMA * sample)
