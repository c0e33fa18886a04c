"""Which workers a request may be routed to as their running slots and their KV room
stand (part of the routing decision, shards/router.py). Pure.

A request that must wait for a running slot on a worker (`WorkerLoad.waits_for_slot`)
waits for the rest of a running decode there: seconds, where the prefill a cached prefix
saves is milliseconds per hundred tokens. A request the worker's KV rule holds back
(`WorkerLoad.waits_for_kv`, the worker's own `may_pin`: past half the hot blocks a tenant
alone pins no more) waits longer still: until its tenant's running requests there end
(QA214: a 520-token agent step waited 17 s behind its tenant's six streams while two
workers sat idle). The router measures no decode times, so it has no estimate of either
wait to weigh against the saving; hence one rule, applied to slots (`slot_candidates`)
and then to KV room (`kv_candidates`):

Invariant: while some live worker would admit the request at once, the workers where it
must wait are not candidates, except the request's session's own worker when the prefix
the session has cached there saves more than `imbalance_threshold_tokens` beyond what the
best admitting worker would hold of it (counting a prefix copy the router would make
there): the tokens past which the router already lets load outweigh cache locality. When
every live worker or none would admit it, every live worker stays a candidate (the
`slot_wait_tokens` price in their loads decides, as before).
"""
from __future__ import annotations

from collections.abc import Mapping

from shards.prefix_index import PrefixRun
from shards.fair_queue import pinned_blocks
from shards.route_records import RouteQuery, RouterConfig, WorkerCosts, WorkerLoad
from shards.transfer_decision import decide_transfer, saved_tokens


def slot_candidates(config: RouterConfig, weights: Mapping[str, float], live: list[str],
                    loads: Mapping[str, WorkerLoad], costs: Mapping[str, WorkerCosts],
                    runs: Mapping[str, PrefixRun], query: RouteQuery, own: str | None) -> list[str]:
    """Of `live` (sorted), the workers the request may go to as their slots stand
    (sorted); `own`: its session's worker, None if it has none."""
    tenant = None if query.flex else query.tenant
    free = [w for w in live if not loads[w].waits_for_slot(config, weights, tenant)]
    return _admitting(config, live, costs, runs, query, own, free)


def kv_candidates(config: RouterConfig, weights: Mapping[str, float], live: list[str],
                  loads: Mapping[str, WorkerLoad], costs: Mapping[str, WorkerCosts],
                  runs: Mapping[str, PrefixRun], query: RouteQuery, own: str | None) -> list[str]:
    """Of `live` (sorted), the workers the request may go to as their KV room stands
    (sorted): a flex request is held to its tenant's pins, as the worker holds it. Where
    some worker would hold it back, it goes only to those that would start it and serve no
    other tenant (idle, or its tenant's alone): a tenant's own overflow never spills onto
    other tenants' workers (bench_routing's burst: their p99 rose 1.04 -> 1.6), and when
    there are none, every live worker stays a candidate, as before."""
    num_blocks = pinned_blocks(query.num_prompt_tokens, config.block_size)
    admitting = [w for w in live if not loads[w].waits_for_kv(config, weights, query.tenant, num_blocks)]
    if len(admitting) == len(live):
        return live
    free = [w for w in admitting if not loads[w].serves_other_tenants(query.tenant)]
    return _admitting(config, live, costs, runs, query, own, free)


def _admitting(config: RouterConfig, live: list[str], costs: Mapping[str, WorkerCosts],
               runs: Mapping[str, PrefixRun], query: RouteQuery, own: str | None, free: list[str]) -> list[str]:
    """The module's rule, given `free`: those of `live` that would admit the request at once."""
    if not free or len(free) == len(live):
        return live
    if own in live and own not in free:
        kept = saved_tokens(config, runs[own], query.num_prompt_tokens)
        elsewhere = max(decide_transfer(config, costs, w, "affinity", runs, query).num_expected_cached_tokens
                        for w in free)
        if kept - elsewhere > config.imbalance_threshold_tokens:
            return sorted([*free, own])
    return free
