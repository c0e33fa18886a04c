"""What the router is told and what it answers: its configuration, a request's query,
the decision, and the loads, costs and counts it keeps per worker (records only; the
decision itself is `shards.router.Router`)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from cache.hashing import BlockHash

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
    `num_active_decodes` and `num_outstanding` count the requests of both tiers."""

    num_queued_prefill_tokens: int = 0
    num_active_decodes: int = 0
    num_outstanding: int = 0
    by_tenant: dict[str, TenantLoad] = field(default_factory=dict)
    num_flex_prefill_tokens: int = 0


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
    num_transfer_blocks: int = 0
    transfer_saves_s: float = 0.0  # the recompute the copy spares the worker, as estimated
    moved_from: str | None = None  # the session's previous worker, when it leaves one


@dataclass(slots=True)
class RouterStats:
    num_routed: dict[str, int] = field(default_factory=dict)
    num_transfers: int = 0
    num_expected_cached_tokens: int = 0
    num_session_moves: int = 0
