"""What the engine reports: health, router and worker counters, where a request runs.

`EngineReports` is a part of `shards.engine.LocalEngine` (its base class), kept apart so
that each file holds one concept. Every method reads the engine's state under its lock
(`_lock`, `_dispatcher`, `_supervisor`, `_channels`, `_placements`, `_stats`) and returns
plain values: callers may keep and change them.
"""
from __future__ import annotations

import asyncio

from shards.protocol import StatsRequest


class EngineReports:
    """The reports of a `LocalEngine`."""

    def worker_of(self, request_id: str) -> str | None:
        with self._lock:
            request = self._dispatcher.requests.get(request_id)
            return request.worker_id if request is not None else None

    def worker_pid(self, worker_id: str) -> int | None:
        with self._lock:
            channel = self._channels.get(worker_id)
            return channel.pid() if channel is not None else None

    def health(self) -> dict:
        with self._lock:
            router = self._dispatcher.router
            workers = {}
            for health in self._supervisor.workers():
                channel = self._channels.get(health.worker_id)
                ready = health.state == "ready"
                workers[health.worker_id] = {
                    "alive": bool(channel is not None and channel.is_alive()), "ready": ready,
                    "state": health.state, "incarnation": health.incarnation,
                    "num_restarts": health.num_restarts, "fence_reason": health.fence_reason,
                    "in_flight": router.load(health.worker_id).num_outstanding if ready else 0,
                    "num_cached_blocks_indexed": router.index.num_blocks(health.worker_id),
                    **dict(zip(("device", "dtype"), self._placements.get(health.worker_id, ("", ""))))}
            return {"workers": workers, "transport": self.transport_name, "device": self.config.device,
                    "dtype": self._settled_dtype(), "num_queued": len(self._dispatcher.queue),
                    "cost_probe": self.cost_probe, "policy": self.config.policy,
                    "prefix_caching": self.config.prefix_caching,
                    "tenant_weights": dict(self.config.tenant_weights),
                    "kv_shares": self._static_shares() or {}}

    def _settled_dtype(self) -> str:
        """The dtype the workers loaded, once any reported it ("auto" settled on a Ray
        node; several names joined by "," if nodes settled differently), else the
        configured one. Caller holds the lock."""
        reported = sorted({dtype for _, dtype in self._placements.values() if dtype})
        return ",".join(reported) if reported else self.config.dtype

    def tenant_home(self, tenant: str) -> str:
        """The worker `tenant`'s new sessions are placed on (shards.router, rule 3)."""
        with self._lock:
            return self._dispatcher.router.home(tenant)

    def router_stats(self) -> dict:
        with self._lock:
            stats = self._dispatcher.stats
            router = self._dispatcher.router
            return {"num_routed": dict(router.stats.num_routed),
                    "num_transfers": router.stats.num_transfers,
                    "num_session_moves": router.stats.num_session_moves,
                    "num_rehomed": router.stats.num_rehomed,
                    "num_transfers_done": stats.num_transfers_done,
                    # copies given up (deadline passed, or a worker at either end fenced): their
                    # requests prefilled instead; with those done, what `num_transfers` became
                    "num_transfers_abandoned": stats.num_transfers_abandoned,
                    "num_transferred_blocks": stats.num_transferred_blocks,
                    "num_retried": stats.num_retried, "num_resumed": stats.num_resumed,
                    "num_expired": stats.num_expired,
                    "num_failed_worker_died": stats.num_failed_worker_died,
                    "num_rejected": dict(stats.num_rejected),
                    # blocks of prompts hashed on the event loop, and those reused from the session's last prompt
                    "num_hashed_blocks": self._session_hashes.num_hashed_blocks,
                    "num_hash_reused_blocks": self._session_hashes.num_reused_blocks}

    async def refresh_stats(self, timeout_s: float = 1.0) -> None:
        with self._lock:
            for worker_id in self._supervisor.ready_workers():
                self._channels[worker_id].send(StatsRequest())
        await asyncio.sleep(min(timeout_s, 0.2))

    def metrics(self) -> list[dict]:
        rows = []
        health = self.health()["workers"]
        for worker_id, state in health.items():
            stats = self._stats.get(worker_id)
            rows.append({"worker": worker_id, **(stats.stats if stats else {}),
                         "num_running": stats.num_running if stats else 0,
                         "num_waiting": stats.num_waiting if stats else 0,
                         "ready": int(state["ready"]), "num_restarts": state["num_restarts"],
                         "in_flight": state["in_flight"]})
        return rows
