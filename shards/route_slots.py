"""Which workers a request may be routed to as their running slots stand (part of the
routing decision, shards/router.py). Pure.

A request that must wait for a running slot on a worker (`WorkerLoad.waits_for_slot`)
waits for the rest of a running decode there: seconds, where the prefill a cached prefix
saves is milliseconds per hundred tokens. The router measures no decode times, so it has
no estimate of that wait to weigh against the saving; hence the rule:

Invariant: while some live worker has a free slot for the request, the workers where it
must wait for one are not candidates, except the request's session's own worker when the
prefix the session has cached there saves more than `imbalance_threshold_tokens` beyond
what the best free worker would hold of it (counting a prefix copy the router would make
there): the tokens past which the router already lets load outweigh cache locality. When
every live worker or none has a free slot, every live worker stays a candidate (the
`slot_wait_tokens` price in their loads decides, as before).
"""
from __future__ import annotations

from collections.abc import Mapping

from shards.prefix_index import PrefixRun
from shards.route_records import RouteQuery, RouterConfig, WorkerCosts, WorkerLoad
from shards.transfer_decision import decide_transfer, saved_tokens


def slot_candidates(config: RouterConfig, weights: Mapping[str, float], live: list[str],
                    loads: Mapping[str, WorkerLoad], costs: Mapping[str, WorkerCosts],
                    runs: Mapping[str, PrefixRun], query: RouteQuery, own: str | None) -> list[str]:
    """Of `live` (sorted), the workers the request may go to (sorted); `own`: its
    session's worker, None if it has none."""
    tenant = None if query.flex else query.tenant
    free = [w for w in live if not loads[w].waits_for_slot(config, weights, tenant)]
    if not free or len(free) == len(live):
        return live
    if own in live and own not in free:
        kept = saved_tokens(config, runs[own], query.num_prompt_tokens)
        elsewhere = max(decide_transfer(config, costs, w, "affinity", runs, query).num_expected_cached_tokens
                        for w in free)
        if kept - elsewhere > config.imbalance_threshold_tokens:
            return sorted([*free, own])
    return free
