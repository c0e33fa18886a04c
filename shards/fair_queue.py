"""Weighted fair queueing across tenants (start-time fair queueing), bounded.

Each tenant has its own FIFO. An entry gets a virtual start tag
`S = max(V, F_last[tenant])` and finish tag `F = S + cost / weight`, where `V` is the
start tag of the entry served last. Entries leave in order of start tag, so over any
busy period each backlogged tenant receives service in proportion to its weight, and a
tenant that was idle re-enters at the current virtual time: it neither banks credit
while idle nor waits behind another tenant's backlog.

Used twice with the same code: by the engine's router (requests waiting for a worker)
and by each worker (requests waiting for a running slot).

Invariants:
- within one tenant, entries leave in arrival order;
- `len(queue)` never exceeds `max_total`, nor a tenant's count `max_per_tenant`:
  `push` refuses instead (the caller answers 429/503);
- removing an entry (a cancel) never reorders the others;
- only tenants with queued entries have a FIFO here (an emptied one is dropped), so the
  scheduling passes that run before every decode step cost what is queued, not every
  tenant ever served.

NOTE: `may_admit` is the companion rule for *slots* (running requests): a tenant below
its weighted share of the slots may be admitted past the soft limit, so a burst from one
tenant that filled every slot before another tenant arrived cannot make that tenant wait
for the burst's generations to end.
"""
from __future__ import annotations

import enum
import itertools
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

DEFAULT_DECODE_COST_TOKENS = 64


class PushResult(enum.Enum):
    ADMITTED = "admitted"
    TENANT_FULL = "tenant_full"  # this tenant's queue is at its bound: 429, retry later
    QUEUE_FULL = "queue_full"  # the whole queue is at its bound: 503, overloaded


@dataclass(slots=True)
class _Entry(Generic[T]):
    key: str
    tenant: str
    item: T
    start_tag: float
    finish_tag: float
    seq: int


def checked_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """`weights` as a dict of its own; ValueError unless every weight is > 0."""
    if any(not weight > 0 for weight in weights.values()):
        raise ValueError("tenant weights must be positive")
    return dict(weights)


class FairQueue(Generic[T]):
    """Per-tenant FIFOs served by weighted start-time fair queueing.

    `weights` maps tenant -> weight (> 0); unknown tenants get `default_weight`.
    `max_per_tenant` / `max_total` bound the queue (None: unbounded). Keys are unique.
    """

    def __init__(self, weights: Mapping[str, float] | None = None, *, default_weight: float = 1.0,
                 max_per_tenant: int | None = None, max_total: int | None = None) -> None:
        if not default_weight > 0:
            raise ValueError("tenant weights must be positive")
        self._weights = checked_weights(weights or {})
        self._default_weight = default_weight
        self._max_per_tenant = max_per_tenant
        self._max_total = max_total
        self._queues: dict[str, deque[_Entry[T]]] = {}
        self._by_key: dict[str, _Entry[T]] = {}
        self._last_finish: dict[str, float] = {}
        self._virtual_time = 0.0
        self._seq = itertools.count()

    def weight(self, tenant: str) -> float:
        return self._weights.get(tenant, self._default_weight)

    def set_weights(self, weights: Mapping[str, float]) -> None:
        """New weights for the entries pushed from now on (those queued keep their tags)."""
        self._weights = checked_weights(weights)

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: str) -> bool:
        return key in self._by_key

    def __iter__(self) -> Iterator[T]:
        """Items in arrival order (for inspection; not the service order)."""
        return iter([e.item for e in sorted(self._by_key.values(), key=lambda e: e.seq)])

    def num_queued(self, tenant: str) -> int:
        queue = self._queues.get(tenant)
        return len(queue) if queue else 0

    def tenants(self) -> list[str]:
        """Tenants with at least one queued entry."""
        return list(self._queues)

    def can_push(self, tenant: str) -> PushResult:
        if self._max_total is not None and len(self._by_key) >= self._max_total:
            return PushResult.QUEUE_FULL
        if self._max_per_tenant is not None and self.num_queued(tenant) >= self._max_per_tenant:
            return PushResult.TENANT_FULL
        return PushResult.ADMITTED

    def push(self, tenant: str, key: str, item: T, cost: float) -> PushResult:
        """Queue `item` under unique `key`, or refuse it (the queue is unchanged then)."""
        if key in self._by_key:
            raise ValueError(f"key {key!r} is already queued")
        verdict = self.can_push(tenant)
        if verdict is not PushResult.ADMITTED:
            return verdict
        start = max(self._virtual_time, self._last_finish.get(tenant, 0.0))
        finish = start + max(cost, 1e-9) / self.weight(tenant)
        entry = _Entry(key, tenant, item, start, finish, next(self._seq))
        self._last_finish[tenant] = finish
        self._queues.setdefault(tenant, deque()).append(entry)
        self._by_key[key] = entry
        return PushResult.ADMITTED

    def push_front(self, tenant: str, key: str, item: T) -> None:
        """Requeue an entry ahead of everything (a retry after its worker died); it
        ignores the bounds, since it was admitted once already."""
        if key in self._by_key:
            raise ValueError(f"key {key!r} is already queued")
        entry = _Entry(key, tenant, item, self._virtual_time, self._virtual_time, -next(self._seq))
        self._queues.setdefault(tenant, deque()).appendleft(entry)
        self._by_key[key] = entry

    def _heads(self) -> list[_Entry[T]]:
        heads = [q[0] for q in self._queues.values()]
        heads.sort(key=lambda e: (e.start_tag, e.finish_tag, e.seq))
        return heads

    def pop(self) -> T | None:
        """The next item in fair order; None when empty."""
        return self.pop_first(lambda tenant, item: True)

    def pop_first(self, can_serve: Callable[[str, T], bool]) -> T | None:
        """The first tenant head, in fair order, that `can_serve(tenant, item)`; None if none."""
        for head in self._heads():
            if can_serve(head.tenant, head.item):
                self._take(head)
                return head.item
        return None

    def remove(self, key: str) -> T | None:
        """Take out the entry `key` (cancelled while queued); None if absent."""
        entry = self._by_key.pop(key, None)
        if entry is None:
            return None
        queue = self._queues[entry.tenant]
        queue.remove(entry)
        if not queue:
            del self._queues[entry.tenant]
        return entry.item

    def _take(self, entry: _Entry[T]) -> None:
        self.remove(entry.key)   # a head: found first
        self._virtual_time = max(self._virtual_time, entry.start_tag)


def pinned_blocks(num_prompt_tokens: int, block_size: int) -> int:
    """The KV blocks a request of `num_prompt_tokens` (its `WorkItem.prompt_token_ids`)
    pins on its worker from its admission to its end: what `may_pin` counts, on the worker
    (`WorkerLoop._num_blocks`) and in the router's view of it (`WorkerLoad.pinned_blocks`)."""
    return num_prompt_tokens // block_size + 1


def may_pin(tenant: str, num_blocks: int, num_pinned_by_tenant: Mapping[str, int],
            waiting_tenants: set[str], weights: Mapping[str, float], capacity: int,
            default_weight: float = 1.0) -> bool:
    """May `tenant` start a request that pins `num_blocks` KV blocks? Always when it pins
    none yet (every tenant progresses); freely while everything pinned stays within half
    of the `capacity`; past that, never for a tenant alone (the other half is headroom
    for tenants that may come), else only within its weighted share of the capacity
    among the tenants pinning or waiting. A burst can thus never pin the whole cache:
    other tenants' requests still find room to store their blocks."""
    num_own = num_pinned_by_tenant.get(tenant, 0)
    if num_own == 0:
        return True
    if sum(num_pinned_by_tenant.values()) + num_blocks <= capacity // 2:
        return True
    active = {t for t, n in num_pinned_by_tenant.items() if n > 0} | waiting_tenants
    if not active - {tenant}:
        return False
    return num_own + num_blocks <= fair_share(tenant, active, weights, capacity, default_weight)


def work_cost(num_prompt_tokens: int, max_tokens: int,
              decode_cost_tokens: int = DEFAULT_DECODE_COST_TOKENS) -> float:
    """The fair-queueing cost of a request, in tokens: its prompt plus its completion
    budget, the latter capped (a client asking for 4096 tokens usually stops far sooner)."""
    return float(num_prompt_tokens + min(max_tokens, decode_cost_tokens))


def fair_share(tenant: str, active_tenants: set[str], weights: Mapping[str, float],
               capacity: float, default_weight: float = 1.0) -> float:
    """`tenant`'s weighted share of `capacity` among `active_tenants` (it included)."""
    active = active_tenants | {tenant}
    total = sum(weights.get(t, default_weight) for t in active)
    return capacity * weights.get(tenant, default_weight) / total


def may_admit(tenant: str, num_used_by_tenant: Mapping[str, int], waiting_tenants: set[str],
              weights: Mapping[str, float], soft_limit: int, hard_limit: int,
              default_weight: float = 1.0) -> bool:
    """May `tenant` take one more slot? Yes below `soft_limit` in total; between the soft
    and the `hard_limit` only while the tenant holds less than its weighted share of
    `hard_limit` among the tenants using or waiting for slots.

    NOTE: the share is of the hard limit: a tenant alone fills the soft limit, and the
    headroom above it is what the others use while it stays there."""
    num_used = sum(num_used_by_tenant.values())
    if num_used < soft_limit:
        return True
    if num_used >= hard_limit:
        return False
    active = {t for t, n in num_used_by_tenant.items() if n > 0} | waiting_tenants
    if not active - {tenant}:
        return False  # alone: the headroom is kept for tenants that may come
    share = fair_share(tenant, active, weights, hard_limit, default_weight)
    return num_used_by_tenant.get(tenant, 0) < share
