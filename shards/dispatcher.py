"""The engine's request bookkeeping: admission, fair dispatch, retries, transfers. No I/O.

A request is, from `submit` until its terminal event, in exactly one place:
- queued at the router (a weighted fair queue across tenants, bounded; flex requests
  after the default tier's, `shards.tiered_queue`);
- waiting for a shared-prefix transfer to its chosen worker (bounded in time);
- on a worker (sent; the router holds its load charge).
Every method returns an `Outbound`: messages to send to workers, in order, and events
to deliver to request streams; the engine performs them under the same lock, so the
per-worker message order (ImportPrefix before the WorkItem that needs it) holds. What it
makes of each worker's message (events, cache reports, transfers, measured costs) lives in
`shards.dispatch_messages` (a base class).

Invariants:
- every submitted request gets exactly one terminal delivery (FinishEvent/ErrorEvent),
  unless the caller cancelled it first: a worker's death requeues its requests (at most
  `max_attempts` tries in all) — one that has sent tokens resumed from its last one
  (`WorkItem.resumed`: the stream goes on, nothing sent twice; the log probabilities
  asked for came with each sent token) — and fails the others with "worker_died"; a
  request queued past `max_queue_wait_s` (since its submit, or its requeue) fails with "overloaded";
- a request of several runs (a prompt's `n` choices) is admitted or refused as a unit
  with its first run (`submit`'s `room`): its later runs are never refused after it began;
- a worker is sent new requests only while `can_take` holds (its outstanding count below the
  soft limit, or the hard limit for a tenant under its weighted share) and it is `Router.usable`
  (never one being fenced, found dead or hung): else the request waits queued, no error;
- a shared-memory segment named in a PrefixExported is imported or unlinked, never lost;
- while the engine says its workers `cannot_start` (each one's last start failed to load the
  model) and none is ready, a request is refused at once ("overloaded", the reason in its
  message) rather than queued for `max_queue_wait_s` in vain, and those queued then fail at
  once; the next worker ready ends it. A worker merely restarting after a crash is not that:
  requests queue for it as ever.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from cache.hashing import BlockHash
from shards.dispatch_messages import DispatchMessages
from shards.fair_queue import PushResult, may_admit, work_cost
from shards.protocol import CancelRequest, CostProfile, ErrorEvent, SessionMoved, WorkItem
from shards.transfer_messages import ExportPrefix
from shards.dispatch_records import CannotStart, DispatchConfig, DispatchStats, Outbound, Request, Transfer
from shards.outstanding_requests import OutstandingRequests
from shards.prefix_transfers import PrefixTransfers
from shards.route_records import RouteQuery
from shards.router import Router
from shards.tiered_queue import TieredQueue

__all__ = ["DispatchConfig", "DispatchStats", "Dispatcher", "Outbound", "Request", "Transfer"]

CANNOT_START_CODE = "workers_cannot_start"   # its count in `stats.num_rejected` (the error says "overloaded")


class Dispatcher(DispatchMessages):
    def __init__(self, router: Router, config: DispatchConfig | None = None) -> None:
        self.router = router
        self.config = config or DispatchConfig()
        self.weights = dict(self.config.tenant_weights)
        self.queue: TieredQueue[Request] = TieredQueue(
            self.weights, max_per_tenant=self.config.max_queued_per_tenant,
            max_total=self.config.max_queued_requests)
        self.requests: dict[str, Request] = {}
        self._ready = OutstandingRequests()   # the ready workers, with their requests out per tenant
        self.stats = DispatchStats()
        self.transfers = PrefixTransfers(self.stats)
        self._cannot_start: CannotStart | None = None

    def set_weights(self, weights: Mapping[str, float]) -> None:
        """Tenants' weights, from now on, in the queue, the router and the per-worker caps
        (and in its config and the router's)."""
        self.queue.set_weights(weights)
        self.router.set_weights(weights)
        self.weights = dict(weights)
        self.config = dataclasses.replace(self.config, tenant_weights=self.router.config.tenant_weights)

    # --- workers ------------------------------------------------------------------------
    def add_worker(self, worker_id: str, costs: CostProfile | None, now_s: float) -> Outbound:
        """A worker (incarnation) became ready: routable from now on."""
        self.router.remove_worker(worker_id)  # a restart starts from an empty cache
        self.router.add_worker(worker_id)
        if costs is not None:
            c = self.router.costs(worker_id)
            c.prefill_s_per_token = costs.prefill_s_per_token
            c.export_s_per_block = costs.export_s_per_block
            c.import_s_per_block = costs.import_s_per_block
        self._ready.add_worker(worker_id)
        self._cannot_start = None
        return self.pump(now_s)

    def set_cannot_start(self, reason: str | None, restart_at_s: float, now_s: float) -> Outbound:
        """No worker can start (`reason`: why, e.g. "worker w0 failed to start: ModelLoadError:
        ..."; None: one may again, as when a restart crashed rather than failed to load):
        fail the queued requests now and refuse new ones, until a worker is added or this
        is called with None. Their errors are "overloaded" (a 503 for a request never run),
        retry after the time left until the next restart (`restart_at_s`, counting down)."""
        self._cannot_start = None if reason is None else CannotStart(reason, restart_at_s)
        out = Outbound()
        for request in list(self.queue) if reason is not None else ():
            self.queue.remove(request.item.request_id)
            self.requests.pop(request.item.request_id, None)
            out.deliveries.append(self._cannot_start_error(request.item.request_id, not request.token_sent, now_s))
        return out

    def _cannot_start_error(self, request_id: str, retryable: bool, now_s: float) -> ErrorEvent:
        self.stats.count_rejected(CANNOT_START_CODE)
        return self._cannot_start.refusal(request_id, retryable, now_s, self.config.retry_after_s)

    def set_round_trip(self, worker_id: str, round_trip_s: float) -> None:
        if worker_id in self._ready:
            self.router.costs(worker_id).round_trip_s = round_trip_s

    def remove_worker(self, worker_id: str, now_s: float) -> Outbound:
        """Fence: nothing routes to the worker any more; its requests are retried
        elsewhere (resumed, those that sent tokens) or failed; transfers through it are
        abandoned."""
        out = Outbound()
        self._ready.remove_worker(worker_id)
        self.router.remove_worker(worker_id)
        for transfer in self.transfers.abandon_through(worker_id):
            self._send_without_copy(transfer, out)
        for request in [r for r in self.requests.values() if r.worker_id == worker_id]:
            request.worker_id = None
            if request.num_attempts < self.config.max_attempts:
                request.submitted_s = now_s   # its queue wait counts from its requeue
                if request.token_sent:
                    request.item = request.item.resumed(request.sent_token_ids, request.num_sent_chars)
                    self.stats.num_resumed += 1
                else:
                    self.stats.num_retried += 1
                self.queue.push_front(request.item.tenant, request.item.request_id, request, flex=request.item.flex)
                continue
            del self.requests[request.item.request_id]
            self.stats.num_failed_worker_died += 1
            out.deliveries.append(ErrorEvent(
                request.item.request_id, f"worker {worker_id} died", "worker_died",
                retryable=not request.token_sent))
        out.extend(self.pump(now_s))
        return out

    def ready_workers(self) -> list[str]:
        return sorted(self._ready)

    def can_take(self, worker_id: str, tenant: str) -> bool:
        config = self.config
        return may_admit(tenant, self._ready.by_tenant(worker_id), set(self.queue.tenants()),
                         self.weights, config.max_outstanding_per_worker, config.max_outstanding_hard)

    # --- requests -----------------------------------------------------------------------
    def submit(self, item: WorkItem, hashes: list[BlockHash], now_s: float, *, room: int = 1) -> Outbound:
        """Queue the request, or refuse it ("rate_limit_exceeded": its tenant's queue bound,
        "overloaded": the engine's) unless both bounds have `room` entries free: 1, its own;
        n, the first run of a request of n (its prompt's choices); 0, a later run of one,
        admitted with it (never refused)."""
        self.stats.num_submitted += 1
        if self._cannot_start is not None and not self._ready:
            return Outbound(deliveries=[self._cannot_start_error(item.request_id, True, now_s)])
        request = Request(item, hashes, now_s)
        verdict = self.queue.push(item.tenant, item.request_id, request,
                                  work_cost(len(item.prompt_token_ids), item.sampling.max_tokens), flex=item.flex,
                                  room=room)
        if verdict is not PushResult.ADMITTED:
            code = "rate_limit_exceeded" if verdict is PushResult.TENANT_FULL else "overloaded"
            self.stats.count_rejected(code)
            who = f"tenant {item.tenant!r} has" if verdict is PushResult.TENANT_FULL else "the engine has"
            return Outbound(deliveries=[ErrorEvent(
                item.request_id, f"{who} too many queued requests; retry later", code,
                retryable=True, retry_after_s=self.config.retry_after_s)])
        self.requests[item.request_id] = request
        return self.pump(now_s)

    def cancel(self, request_id: str) -> Outbound:
        """The caller stopped reading: forget the request, tell its worker to stop."""
        out = Outbound()
        self.queue.remove(request_id)
        request = self.requests.pop(request_id, None)
        if request is None:
            return out
        self.transfers.forget_request(request_id)
        if request.worker_id is not None:
            self._release(request)
            out.sends.append((request.worker_id, CancelRequest(request_id)))
        return out

    def pump(self, now_s: float) -> Outbound:
        """Send queued requests, in fair order, to usable workers that can take them (others wait)."""
        out = Outbound()
        usable = self.router.usable(self._ready, now_s) if len(self.queue) else []
        while len(self.queue) and usable:
            request = self.queue.pop_first(lambda tenant, _: any(self.can_take(w, tenant) for w in usable))
            if request is None:
                break
            item = request.item
            candidates = [w for w in usable if self.can_take(w, item.tenant)]
            query = RouteQuery(item.tenant, item.session, request.hashes, len(item.prompt_token_ids), item.flex)
            decision = self.router.route(item.request_id, query, candidates, now_s)
            if decision is None:   # no worker now: it waits at the front, as it was
                self.queue.push_front(item.tenant, item.request_id, request, flex=item.flex)
                break
            request.worker_id = decision.worker_id
            request.num_attempts += 1
            self._ready.charge(decision.worker_id, item.tenant)
            if decision.transfer_from is None:
                out.sends.append((decision.worker_id, item))
            else:
                waited_s = max(self.config.transfer_timeout_s, decision.transfer_saves_s)
                transfer_id = self.transfers.start(item.request_id, decision.transfer_from,
                                                   decision.worker_id, now_s + waited_s)
                num_tokens = decision.num_transfer_blocks * self.router.config.block_size
                out.sends.append((decision.transfer_from, ExportPrefix(
                    transfer_id, item.tenant, tuple(item.prompt_token_ids[:num_tokens]),
                    decision.num_transfer_blocks, inline=self.config.inline_transfers,
                    first_block=decision.transfer_first_block)))
            if decision.moved_from is not None and decision.moved_from in self._ready:
                # NOTE: after any ExportPrefix to the same worker: it copies the blocks first
                out.sends.append((decision.moved_from, SessionMoved(item.tenant, item.session)))
        return out

    def expire(self, now_s: float) -> Outbound:
        """Fail requests queued too long; send on requests whose transfer timed out."""
        out = Outbound()
        for request in list(self.queue):
            if now_s - request.submitted_s <= self.config.max_queue_wait_s:
                continue
            self.queue.remove(request.item.request_id)
            self.requests.pop(request.item.request_id, None)
            self.stats.num_expired += 1
            out.deliveries.append(ErrorEvent(
                request.item.request_id, "no worker could take the request in time", "overloaded",
                retryable=not request.token_sent, retry_after_s=self.config.retry_after_s))
        for transfer in self.transfers.abandon_expired(now_s):
            self._send_without_copy(transfer, out)
        return out

    # --- helpers ----------------------------------------------------------------------------
    def _send_without_copy(self, transfer: Transfer, out: Outbound) -> None:
        """An abandoned transfer's request, still placed on its destination, is sent there
        to prefill what the copy would have brought."""
        request = self.requests.get(transfer.request_id)
        if request is not None and request.worker_id == transfer.dst:
            out.sends.append((transfer.dst, request.item))

    def _release(self, request: Request) -> None:
        self.router.on_done(request.item.request_id)
        self._ready.release(request.worker_id, request.item.tenant)
