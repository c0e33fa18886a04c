"""Two service tiers in one bounded queue: every `default` request before any `flex` one.

A request with `WorkItem.flex` (OpenAI's `service_tier: "flex"`, and the Batch API's
requests) is work nobody is waiting on token by token. It waits in the flex tier, which is
served only when no default-tier request can be: the engine's queue (requests waiting for
a worker) and each worker's queue (requests waiting for a slot) are both `TieredQueue`s.
Within each tier, tenants share by weighted fair queueing (`shards.fair_queue.FairQueue`,
one per tier, so one tier's backlog never moves the other's virtual time).

Invariants:
- `pop_first` returns a flex item only when no default-tier head may be served;
- within a tier, one tenant's entries leave in arrival order;
- the bounds (`max_per_tenant`, `max_total`) count both tiers together. `push` refuses
  an entry unless each bound has `room` entries free: 1, its own; more, its own and those
  of its request's later runs, which will follow it (at most a whole bound); 0 for such a
  later run, which goes past the bounds as `push_front` (a retry of an admitted request)
  does. Flex entries fill at most half of each bound (rounded up), so a flood of batch
  work never leaves a default request without room;
- a key is in at most one tier.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

from shards.fair_queue import FairQueue, PushResult

T = TypeVar("T")


class TieredQueue(Generic[T]):
    def __init__(self, weights: Mapping[str, float] | None = None, *, max_per_tenant: int | None = None,
                 max_total: int | None = None) -> None:
        self.default: FairQueue[T] = FairQueue(weights)
        self.flex: FairQueue[T] = FairQueue(weights)
        self._max_per_tenant = max_per_tenant
        self._max_total = max_total

    def weight(self, tenant: str) -> float:
        return self.default.weight(tenant)

    def set_weights(self, weights: Mapping[str, float]) -> None:
        for tier in (self.default, self.flex):
            tier.set_weights(weights)

    def __len__(self) -> int:
        return len(self.default) + len(self.flex)

    def __contains__(self, key: str) -> bool:
        return key in self.default or key in self.flex

    def __iter__(self) -> Iterator[T]:
        """The default tier's items, then the flex tier's, each in arrival order."""
        yield from self.default
        yield from self.flex

    def num_queued(self, tenant: str) -> int:
        return self.default.num_queued(tenant) + self.flex.num_queued(tenant)

    def tenants(self) -> list[str]:
        """Tenants with at least one entry queued, in either tier."""
        return list(dict.fromkeys([*self.default.tenants(), *self.flex.tenants()]))

    def can_push(self, tenant: str, *, flex: bool = False, room: int = 1) -> PushResult:
        """Whether each bound has `room` entries free for `tenant` (ADMITTED always for 0)."""
        if room <= 0:
            return PushResult.ADMITTED
        if self._max_total is not None and (_full(len(self), room, self._max_total)
                                            or flex and _full(len(self.flex), room, _half(self._max_total))):
            return PushResult.QUEUE_FULL
        if self._max_per_tenant is not None and (
                _full(self.num_queued(tenant), room, self._max_per_tenant)
                or flex and _full(self.flex.num_queued(tenant), room, _half(self._max_per_tenant))):
            return PushResult.TENANT_FULL
        return PushResult.ADMITTED

    def push(self, tenant: str, key: str, item: T, cost: float, *, flex: bool = False,
             room: int = 1) -> PushResult:
        """Queue `item` under unique `key` in its tier, or refuse it (nothing changes then)
        unless each bound has `room` entries free (`can_push`)."""
        if key in self:
            raise ValueError(f"key {key!r} is already queued")
        verdict = self.can_push(tenant, flex=flex, room=room)
        if verdict is PushResult.ADMITTED:
            (self.flex if flex else self.default).push(tenant, key, item, cost)
        return verdict

    def push_front(self, tenant: str, key: str, item: T, *, flex: bool = False) -> None:
        """Requeue ahead of its tier (a retry after its worker died), past the bounds."""
        if key in self:
            raise ValueError(f"key {key!r} is already queued")
        (self.flex if flex else self.default).push_front(tenant, key, item)

    def pop(self) -> T | None:
        return self.pop_first(lambda tenant, item: True)

    def pop_first(self, can_serve: Callable[[str, T], bool]) -> T | None:
        """The first head, the default tier's in fair order then the flex tier's, that
        `can_serve(tenant, item)`; None if none."""
        before = len(self.default)
        item = self.default.pop_first(can_serve)
        return item if len(self.default) < before else self.flex.pop_first(can_serve)

    def remove(self, key: str) -> T | None:
        """Take out the entry `key` from whichever tier holds it; None if absent."""
        return (self.default if key in self.default else self.flex).remove(key)


def _half(bound: int) -> int:
    return (bound + 1) // 2


def _full(num_queued: int, room: int, bound: int) -> bool:
    """A bound holding `num_queued` lacks `room` free entries (asking at most the whole
    bound: a request of more runs than it holds is admitted into an empty queue)."""
    return num_queued + max(1, min(room, bound)) > bound
