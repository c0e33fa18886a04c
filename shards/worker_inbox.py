"""What a worker does with each message in its inbox (`WorkerLoop.handle`).

`WorkerInbox` is a part of `shards.worker.WorkerLoop` (a base class), kept apart so that
each file holds one concept; it uses the loop's `waiting`, `prefilling`, `running`,
`weights`, `runner`, `prefill`, `emit`, `_finish_event`, `flush_cache_events` and
`transfer_failures`.
Invariants: messages are applied in the order they came (one ordered inbox per worker);
a cancelled request gets its one terminal event and its blocks back wherever it was
(queued, prefilling, running).
"""
from __future__ import annotations

from dataclasses import asdict

from cache.stats import TenantStats
from shards.fair_queue import work_cost
from shards.protocol import (ApplyForecast, CancelRequest, FinishEvent, Ping, Pong, SessionMoved, Shutdown,
                             StatsRequest, TenantShares, WorkerStats, WorkItem)
from shards.transfer_messages import ExportPrefix, ImportPrefix
from shards.worker_config import stats_as_dict
from shards.worker_transfers import export_prefix_for, import_prefix_for


class WorkerInbox:
    """The inbox side of a `WorkerLoop`."""

    def handle(self, message) -> bool:
        """Apply one inbox message; False means shut down."""
        if isinstance(message, WorkItem):
            self.waiting.push(message.tenant, message.request_id, message,
                              work_cost(len(message.prompt_token_ids), message.sampling.max_tokens),
                              flex=message.flex)
        elif isinstance(message, CancelRequest):
            self._cancel(message.request_id)
        elif isinstance(message, Ping):
            self.emit(Pong(self.worker_id, message.nonce, message.sent_s, self.num_active,
                           len(self.waiting)))
        elif isinstance(message, ImportPrefix):
            self._import(message)
        elif isinstance(message, ExportPrefix):
            self._export(message)
        elif isinstance(message, ApplyForecast):
            self.runner.blocks.apply(message.forecast)
        elif isinstance(message, SessionMoved):
            self.runner.blocks.session_moved(message.session)
        elif isinstance(message, TenantShares):
            self._set_tenant_shares(message)
        elif isinstance(message, StatsRequest):
            self.emit(WorkerStats(self.worker_id, self._stats(), self.num_active, len(self.waiting)))
        elif isinstance(message, Shutdown):
            self.alive = False
        return self.alive

    def _stats(self) -> dict:
        """The cache's counters as builtins, the decode counts, and the policy's own: each
        tenant's reserved and pinned blocks and whether its forecasts are followed, the
        pins and prefetches since start (only what the policy has; built here, on a stats
        request, from counters the policy keeps as it acts)."""
        stats = stats_as_dict(self.runner.blocks.stats())
        stats["num_decode_passes"] = self.runner.num_decode_passes
        stats["num_decoded_tokens"] = self.runner.num_decoded_tokens
        tenants = stats["tenants"]
        blank = asdict(TenantStats())

        def row(tenant: str) -> dict:
            # a tenant the cache has no counters for yet (a reservation, no request here)
            # still gets every counter, at 0: its metrics series exist, not only the policy's
            return tenants.setdefault(tenant, dict(blank))

        for tenant, num_reserved in self.runner.blocks.reservations().items():   # the predictive policy's
            # whole blocks: a tenant under its (fractional) share keeps its blocks, so it is
            # guaranteed the share's whole part (25.6 of 256 at kv_share 0.1: 25)
            row(tenant)["num_reserved_blocks"] = int(num_reserved)
        stats.update(self.runner.blocks.action_counts())   # pins, prefetches: the policy's own
        pinned = self.runner.blocks.pinned_blocks()
        if pinned is not None:   # a pinning policy: every tenant's row says how many (0 too)
            for tenant in tenants.keys() | pinned.keys():
                row(tenant)["num_pinned_blocks"] = pinned.get(tenant, 0)
        for tenant, followed in (self.runner.blocks.forecast_verdicts() or {}).items():
            row(tenant)["forecasts_followed"] = int(followed)
        return stats

    def _set_tenant_shares(self, message: TenantShares) -> None:
        """New weights for the queue and the running caps (the dict they read, updated in
        place), and the policy's fixed reservations, re-planned at its next tick."""
        self.waiting.set_weights(dict(message.weights))
        self.weights.clear()
        self.weights.update(message.weights)
        self.runner.blocks.set_static_shares(dict(message.static_shares) if message.static_shares is not None
                                             else None)

    def _export(self, message: ExportPrefix) -> None:
        self.emit(export_prefix_for(self.runner, self.worker_id, message, self.transfer_failures))

    def _import(self, message: ImportPrefix) -> None:
        answer = import_prefix_for(self.runner, self.worker_id, message, self.transfer_failures)
        self.flush_cache_events()
        self.emit(answer)

    def _cancel(self, request_id: str) -> None:
        item = self.waiting.remove(request_id)
        if item is not None:
            self.emit(FinishEvent(request_id, "cancelled", item.num_prompt_tokens, 0, item.num_resumed_tokens, 0.0,
                                  self.worker_id))
            return
        task = self.prefilling.pop(request_id, None)
        if task is not None:
            self.prefill.abort(task)
            self._finish_event(task.seq, "cancelled")
            return
        seq = self.running.pop(request_id, None)
        if seq is not None:
            self.runner.release(seq)
            self._finish_event(seq, "cancelled")
