"""Tenant homes: the worker each tenant's new sessions are placed on (`shards.router`, rule 3).

A home is handed out on a tenant's first request to the worker with the fewest tenants
homed on it (then the lower load, then the lower id). A fenced worker's homes are dropped
(`drop_worker`), so its tenants are homed afresh on their next request, on the workers
still up. When it comes back (a restart keeps its id, with no homes), its new tenants go
to it first; and the tenants re-homed on the survivors move back over time (`rebalance`):
a tenant whose home holds at least two more homes than a worker its new session could go
to is re-homed there, on that new session. Each such move narrows the gap between the most
and the fewest homes, so the homes settle within one of each other and never move back and
forth. Only a new session asks: a session already placed keeps its worker (affinity, rule 2).

Invariant: `num_homed[w]` is the number of tenants whose home is `w`, for every worker `w`
that has any. No I/O.
"""
from __future__ import annotations

from collections.abc import Callable, Collection


class TenantHomes:
    def __init__(self) -> None:
        self._homes: dict[str, str] = {}
        self.num_homed: dict[str, int] = {}   # worker -> tenants whose home it is (kept, never recounted)

    def home(self, tenant: str, workers: Collection[str], load_tokens: Callable[[str], float]) -> str:
        """`tenant`'s home among `workers` (the router's), handed out on first use. Needs a worker."""
        home = self._homes.get(tenant)
        if home is None or home not in workers:
            if home is not None:
                self._forget(tenant)
            counts = self.num_homed
            home = min(workers, key=lambda w: (counts.get(w, 0), load_tokens(w), w))
            self._set(tenant, home)
        return home

    def rebalance(self, tenant: str, candidates: Collection[str]) -> str | None:
        """Re-home `tenant` (homed already) on the candidate with the fewest homes when its
        home holds at least two more; the new home, or None (it stays)."""
        home = self._homes[tenant]
        counts = self.num_homed
        lighter = min(candidates, key=lambda w: (counts.get(w, 0), w), default=None)
        if lighter is None or counts.get(home, 0) - counts.get(lighter, 0) < 2:
            return None
        self._forget(tenant)
        self._set(tenant, lighter)
        return lighter

    def drop_worker(self, worker_id: str) -> None:
        """The worker was fenced: its tenants are homed afresh on their next request."""
        for tenant in [t for t, w in self._homes.items() if w == worker_id]:
            del self._homes[tenant]
        self.num_homed.pop(worker_id, None)

    def _set(self, tenant: str, worker_id: str) -> None:
        self._homes[tenant] = worker_id
        self.num_homed[worker_id] = self.num_homed.get(worker_id, 0) + 1

    def _forget(self, tenant: str) -> None:
        worker_id = self._homes.pop(tenant)
        if worker_id in self.num_homed:
            self.num_homed[worker_id] -= 1
