"""Whether a routed request's prefix is copied from a peer worker, and the prompt tokens
a worker's cached run saves (both part of the routing decision, shards/router.py).

A shared-prefix transfer is proposed when the chosen worker lacks HOT blocks a peer
holds and the measured cost of copying them (export + import per block, plus one round
trip) is below the measured cost of prefilling them. Only those missing blocks are
copied (`Decision.transfer_first_block`: past the chosen worker's own cached run), so
what is shipped is what was costed. Pure functions of their arguments.
"""
from __future__ import annotations

from collections.abc import Mapping

from shards.prefix_index import PrefixRun
from shards.route_records import Decision, RouteQuery, RouteReason, RouterConfig, WorkerCosts


def saved_tokens(config: RouterConfig, run: PrefixRun, num_prompt_tokens: int) -> int:
    """The prompt tokens `run` spares a prefill (host blocks at `host_hit_weight`; at
    least the last prompt token is always computed)."""
    size = config.block_size
    saved = run.num_hot_blocks * size + config.host_hit_weight * run.num_host_blocks * size
    return int(min(saved, max(0, num_prompt_tokens - 1)))


def decide_transfer(config: RouterConfig, costs: Mapping[str, WorkerCosts], chosen: str, reason: RouteReason,
                    runs: Mapping[str, PrefixRun], query: RouteQuery) -> Decision:
    """The decision for `chosen`: with a copy of the longest hot run a peer holds when it
    has `min_transfer_blocks` more than `chosen` and copying them costs less than
    prefilling them (every cost measured), else without. Only those missing blocks are
    copied: the copy starts past `chosen`'s own cached run."""
    own = runs[chosen]
    expected = saved_tokens(config, own, query.num_prompt_tokens)
    decision = Decision(chosen, reason, expected, query.num_prompt_tokens - expected)
    if not config.can_transfer:
        return decision
    holder = max(runs, key=lambda w: (runs[w].num_hot_blocks, w == chosen))
    num_missing = runs[holder].num_hot_blocks - own.num_blocks
    if holder == chosen or num_missing < config.min_transfer_blocks:
        return decision
    src, dst = costs[holder], costs[chosen]
    if None in (src.export_s_per_block, dst.import_s_per_block, dst.prefill_s_per_token):
        return decision
    recompute_s = num_missing * config.block_size * dst.prefill_s_per_token
    # NOTE: only the export adds a hop; the import travels just ahead of the request
    transfer_s = num_missing * (src.export_s_per_block + dst.import_s_per_block) + src.round_trip_s
    if transfer_s >= recompute_s:
        return decision
    run = PrefixRun(runs[holder].num_hot_blocks, 0)
    expected = saved_tokens(config, run, query.num_prompt_tokens)
    return Decision(chosen, reason, expected, query.num_prompt_tokens - expected,
                    transfer_from=holder, num_transfer_blocks=run.num_hot_blocks,
                    transfer_first_block=own.num_blocks, transfer_saves_s=recompute_s)
