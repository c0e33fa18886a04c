"""The workers ready for requests, and how many requests of each tenant each one has out
(`shards.dispatcher`: what `can_take` weighs). No I/O.

Invariants: a worker has counts exactly while it is ready, from none at each start (a
restarted worker holds nothing of its last incarnation); its counts name only the tenants
with a request out on it, so what `fair_queue.may_admit` sums before each send grows with
the tenants active now, not with every tenant ever served.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping


class OutstandingRequests:
    def __init__(self) -> None:
        self._by_worker: dict[str, dict[str, int]] = {}   # worker -> tenant -> count

    def add_worker(self, worker_id: str) -> None:
        self._by_worker[worker_id] = {}

    def remove_worker(self, worker_id: str) -> None:
        self._by_worker.pop(worker_id, None)

    def __contains__(self, worker_id: object) -> bool:
        return worker_id in self._by_worker

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_worker)

    def __len__(self) -> int:
        return len(self._by_worker)

    def by_tenant(self, worker_id: str) -> Mapping[str, int]:
        """The ready worker's requests out, per tenant that has any."""
        return self._by_worker[worker_id]

    def charge(self, worker_id: str, tenant: str) -> None:
        """One more of the tenant's requests went to the ready worker."""
        counts = self._by_worker[worker_id]
        counts[tenant] = counts.get(tenant, 0) + 1

    def release(self, worker_id: str | None, tenant: str) -> None:
        """One of the tenant's requests on the worker ended (nothing if the worker was
        removed since: its counts went with it)."""
        counts = self._by_worker.get(worker_id)
        if counts is not None and counts.get(tenant, 0) > 0:
            counts[tenant] -= 1
            if not counts[tenant]:
                del counts[tenant]
