"""How many of a tenant's batches run at once (`[server] batches_running_per_tenant`), in
one gateway process.

Invariants:
- a batch that has started (`in_progress`, or past it) holds a place until it stops
  running here, even past the cap (a cap lowered by a reload, or a restart with more
  running than it allows, stops none of them);
- a batch not yet started (`validating`) starts only with a place free: a tenant's
  waiting batches start in the order they asked (oldest first), one per place freed, and
  a new batch never goes before one that waits;
- a waiting batch given up (`drop`: it was cancelled) leaves the line at once, and a
  place handed to it just then goes to the next one;
- a tenant's records leave when it holds and awaits nothing (none kept per tenant ever seen).
"""
from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True)
class _TenantPlaces:
    holders: set[str] = field(default_factory=set)   # batch ids running
    waiting: deque[tuple[str, asyncio.Future]] = field(default_factory=deque)   # oldest first


class RunningPlaces:
    """The running places of each tenant's batches; `cap()` is read at each decision (a
    reload's new value applies from the next batch that starts or ends)."""

    def __init__(self, cap: Callable[[], int]) -> None:
        self.cap = cap
        self._tenants: dict[str, _TenantPlaces] = {}

    def num_running(self, tenant: str) -> int:
        places = self._tenants.get(tenant)
        return 0 if places is None else len(places.holders)

    def hold(self, tenant: str, batch_id: str) -> None:
        """A started batch runs: it takes a place whatever the cap."""
        self._tenants.setdefault(tenant, _TenantPlaces()).holders.add(batch_id)

    def try_hold(self, tenant: str, batch_id: str) -> bool:
        """Take a place for a batch about to start, when one is free and none waits."""
        places = self._tenants.setdefault(tenant, _TenantPlaces())
        if places.waiting or len(places.holders) >= self.cap():
            self._forget_if_idle(tenant)
            return False
        places.holders.add(batch_id)
        return True

    async def wait(self, tenant: str, batch_id: str) -> bool:
        """Wait for a place, after the tenant's batches waiting already; True once held,
        False when the batch was given up meanwhile (`drop`)."""
        if self.try_hold(tenant, batch_id):
            return True
        places = self._tenants.setdefault(tenant, _TenantPlaces())
        waiter = asyncio.get_running_loop().create_future()
        places.waiting.append((batch_id, waiter))
        try:
            return await waiter
        except BaseException:   # (the runner stopping): a place handed over just now goes on
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self.release(tenant, batch_id)
            else:
                self._remove_waiter(tenant, batch_id)
            raise

    def drop(self, tenant: str, batch_id: str) -> None:
        """The batch no longer waits for a place (cancelled): its `wait` answers False."""
        places = self._tenants.get(tenant)
        for waiting_id, waiter in list(places.waiting if places is not None else ()):
            if waiting_id == batch_id and not waiter.done():
                waiter.set_result(False)
        self._remove_waiter(tenant, batch_id)

    def release(self, tenant: str, batch_id: str) -> None:
        """The batch stopped running here (or never started): its place, if it held one,
        goes to the tenant's oldest waiting batch."""
        places = self._tenants.get(tenant)
        if places is None:
            return
        places.holders.discard(batch_id)
        while places.waiting and len(places.holders) < self.cap():
            waiting_id, waiter = places.waiting.popleft()
            if not waiter.done():
                places.holders.add(waiting_id)
                waiter.set_result(True)
        self._forget_if_idle(tenant)

    def _remove_waiter(self, tenant: str, batch_id: str) -> None:
        places = self._tenants.get(tenant)
        if places is not None:
            places.waiting = deque(entry for entry in places.waiting if entry[0] != batch_id)
            self._forget_if_idle(tenant)

    def _forget_if_idle(self, tenant: str) -> None:
        places = self._tenants.get(tenant)
        if places is not None and not places.holders and not places.waiting:
            del self._tenants[tenant]
