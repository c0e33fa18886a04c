"""What the router is told and what it answers: its configuration, a request's query,
the decision, and the loads, costs and counts it keeps per worker (records only; the
decision itself is `shards.router.Router`)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from cache.hashing import BlockHash
from shards.fair_queue import may_pin

RouteReason = Literal["reserved", "affinity", "tenant", "prefix", "least_loaded", "imbalance", "round_robin", "flex"]
RoutingPolicy = Literal["prefix", "least_loaded", "round_robin"]
ROUTING_POLICIES = ("prefix", "least_loaded", "round_robin")


@dataclass(frozen=True, slots=True)
class RouterConfig:
    policy: RoutingPolicy = "prefix"
    block_size: int = 16
    decode_cost_tokens: float = 32.0
    slots_per_worker: int = 8
    slot_wait_tokens: float = 512.0
    affinity_slack_tokens: float = 64.0
    host_hit_weight: float = 0.5
    imbalance_threshold_tokens: float = 2048.0
    tenant_homes: bool = True
    max_sessions: int = 100_000
    tenant_weights: tuple[tuple[str, float], ...] = ()
    can_transfer: bool = True
    min_transfer_blocks: int = 2
    num_hot_blocks: int | None = None   # each worker's hot KV capacity (None: its KV rule not modelled)


@dataclass(slots=True)
class WorkerCosts:
    """Measured costs of one worker; None until measured."""

    prefill_s_per_token: float | None = None
    export_s_per_block: float | None = None
    import_s_per_block: float | None = None
    round_trip_s: float = 0.002


@dataclass(slots=True)
class TenantLoad:
    num_queued_prefill_tokens: int = 0
    num_outstanding: int = 0


@dataclass(slots=True)
class WorkerLoad:
    """A worker's load. Per tenant (`by_tenant`): its default-tier requests, and
    `num_queued_prefill_tokens` is their sum over the tenants; flex requests'
    (`WorkItem.flex`, prefilled after the others) prefill is `num_flex_prefill_tokens`;
    `num_active_decodes` and `num_outstanding` count the requests of both tiers, and
    `pinned_blocks` the KV blocks (`pinned_blocks()`) the decoding ones pin per tenant (from
    their first token: requests the worker surely admitted), flex ones under their tenant
    as the worker counts them (a tenant pinning none has no entry).
    Invariant: `release` undoes exactly what `add` (and `start_decode`) did for a request."""

    num_queued_prefill_tokens: int = 0
    num_active_decodes: int = 0
    num_outstanding: int = 0
    by_tenant: dict[str, TenantLoad] = field(default_factory=dict)
    num_flex_prefill_tokens: int = 0
    pinned_blocks: dict[str, int] = field(default_factory=dict)

    def tokens(self, config: RouterConfig, weights: Mapping[str, float], tenant: str | None = None) -> float:
        """This load in prefill-token equivalents: in total (`tenant` None), or as a new
        request of `tenant` would wait for it under the worker's tenant-fair scheduling:
        the queued prefill of tenants holding no more requests here (for their weight) than
        it would, the active decodes, and the requests past `slots_per_worker` when it
        is past its weighted share of the slots (`waits_for_slot`)."""
        decode = config.decode_cost_tokens * self.num_active_decodes
        num_waiting_for_slot = max(0, self.num_outstanding + (tenant is not None) - config.slots_per_worker)
        if tenant is None:
            return (self.num_queued_prefill_tokens + self.num_flex_prefill_tokens + decode
                    + config.slot_wait_tokens * num_waiting_for_slot)
        mine = self.by_tenant.get(tenant)
        rank = ((mine.num_outstanding if mine is not None else 0) + 1) / weights.get(tenant, 1.0)
        ahead = sum(t.num_queued_prefill_tokens for name, t in self.by_tenant.items()
                    if t.num_outstanding / weights.get(name, 1.0) <= rank)
        waits = self.waits_for_slot(config, weights, tenant)
        return ahead + decode + (config.slot_wait_tokens * num_waiting_for_slot if waits else 0.0)

    def waits_for_slot(self, config: RouterConfig, weights: Mapping[str, float], tenant: str | None) -> bool:
        """Would one more request (of `tenant`; None: a flex one) wait here for a running
        slot? Yes when it would be past `slots_per_worker` and, for a default-tier request,
        its tenant would hold more than its weighted share of the slots among the tenants
        with requests here (a tenant within its share is admitted past the soft limit)."""
        if self.num_outstanding + 1 <= config.slots_per_worker:
            return False
        if tenant is None:
            return True
        mine = self.by_tenant.get(tenant)
        num_mine = (mine.num_outstanding if mine is not None else 0) + 1
        active = {name for name, t in self.by_tenant.items() if t.num_outstanding > 0} | {tenant}
        share = config.slots_per_worker * weights.get(tenant, 1.0) / sum(weights.get(t, 1.0) for t in active)
        return num_mine > share

    def waits_for_kv(self, config: RouterConfig, weights: Mapping[str, float], tenant: str, num_blocks: int) -> bool:
        """Would one more request of `tenant` (of either tier), pinning `num_blocks`, wait
        here for KV room? The worker's own rule (`shards.fair_queue.may_pin`, the same
        function) applied to the router's view: never when `num_hot_blocks` is unknown.
        Approximation: the router cannot tell the requests waiting or prefilling on the
        worker from the admitted ones, so it counts only those past their first token
        (surely admitted: a lower bound of the worker's pins) and names no tenant as
        waiting. It errs toward "admits": counting every request routed here as pinning
        pushed a bursting tenant's requests, which its home worker would have taken, onto
        the other tenants' workers (bench_routing's noisy neighbour: their p99 1.04 -> 1.6)."""
        if config.num_hot_blocks is None:
            return False
        return not may_pin(tenant, num_blocks, self.pinned_blocks, set(), weights, config.num_hot_blocks)

    def serves_other_tenants(self, tenant: str) -> bool:
        """Whether a tenant other than `tenant` has a request here (either tier)."""
        return any(name != tenant for name in self.by_tenant) or any(name != tenant for name in self.pinned_blocks)

    # --- charges: `add` when routed, `start_decode` at its first token, `release` at its end
    def add(self, tenant: str, num_prefill_tokens: int, flex: bool) -> None:
        self.num_outstanding += 1
        if flex:
            self.num_flex_prefill_tokens += num_prefill_tokens
            return
        self.num_queued_prefill_tokens += num_prefill_tokens
        mine = self.by_tenant.setdefault(tenant, TenantLoad())
        mine.num_queued_prefill_tokens += num_prefill_tokens
        mine.num_outstanding += 1

    def start_decode(self, tenant: str, num_prefill_tokens: int, flex: bool, *, num_blocks: int) -> None:
        self._release_prefill(tenant, num_prefill_tokens, flex)
        self.num_active_decodes += 1
        if num_blocks:
            self.pinned_blocks[tenant] = self.pinned_blocks.get(tenant, 0) + num_blocks

    def release(self, tenant: str, num_prefill_tokens: int, flex: bool, is_decoding: bool, *,
                num_blocks: int) -> None:
        if is_decoding:
            self.num_active_decodes -= 1
        else:
            self._release_prefill(tenant, num_prefill_tokens, flex)
        self.num_outstanding -= 1
        if is_decoding and num_blocks:
            left = self.pinned_blocks[tenant] - num_blocks
            if left:
                self.pinned_blocks[tenant] = left
            else:
                del self.pinned_blocks[tenant]
        if not flex:
            mine = self.by_tenant[tenant]
            mine.num_outstanding -= 1
            if mine.num_outstanding == 0:
                del self.by_tenant[tenant]

    def _release_prefill(self, tenant: str, num_prefill_tokens: int, flex: bool) -> None:
        if flex:
            self.num_flex_prefill_tokens -= num_prefill_tokens
        else:
            self.num_queued_prefill_tokens -= num_prefill_tokens
            self.by_tenant[tenant].num_queued_prefill_tokens -= num_prefill_tokens


@dataclass(frozen=True, slots=True)
class RouteQuery:
    tenant: str
    session: str | None
    hashes: Sequence[BlockHash]
    num_prompt_tokens: int
    flex: bool = False


@dataclass(slots=True)
class Decision:
    worker_id: str
    reason: RouteReason
    num_expected_cached_tokens: int
    num_prefill_tokens: int
    transfer_from: str | None = None
    num_transfer_blocks: int = 0   # the copy ends there (the holder's hot run) ...
    transfer_first_block: int = 0   # ... and starts there (what the chosen worker holds already)
    transfer_saves_s: float = 0.0  # the recompute the copy spares the worker, as estimated
    moved_from: str | None = None  # the session's previous worker, when it leaves one


@dataclass(slots=True)
class RouterStats:
    num_routed: dict[str, int] = field(default_factory=dict)
    num_transfers: int = 0
    num_expected_cached_tokens: int = 0
    num_session_moves: int = 0
    num_rehomed: int = 0   # tenants moved to a worker with fewer homes (shards/tenant_homes.py)
