"""What the dispatcher (`shards.dispatcher.Dispatcher`) makes of a worker's messages: its
cache reports feed the router's prefix index, its token/finish/error events go to their
request's stream, a prefix export goes on to its import, and each measured time is
folded into the router's cost model. No I/O.

`DispatchMessages` is a part of `Dispatcher` (a base class), kept apart so that each file
holds one concept. It uses the dispatcher's `requests`, `router`, `stats`, `transfers`,
`_ready`, `_release` and `pump`.

Invariants:
- a message from a worker not ready (fenced, or a stale incarnation's) changes neither the
  prefix index nor the cost model, and an event for a request not placed on that worker
  (cancelled, or requeued elsewhere) is dropped;
- a request's terminal event releases its load charge and is delivered once; a resumed
  request's finish reports the cached tokens of the prompt its client waited on;
- a shared-memory segment named in a PrefixExported is imported (its ImportPrefix sent
  before the WorkItem that needs it, to the same worker) or unlinked, never lost;
- only a prefill of at least `MIN_MEASURED_PREFILL_TOKENS` computed prompt tokens, not
  resumed, is a measure of the prefill cost.
"""
from __future__ import annotations

import dataclasses

from shards.dispatch_records import Outbound
from shards.measured_costs import fold_cost
from shards.protocol import CacheEventsReport, CacheSnapshot, EngineEvent, ErrorEvent, FinishEvent, TokenEvent
from shards.transfer_messages import ImportPrefix, PrefixExported, PrefixImported

MIN_MEASURED_PREFILL_TOKENS = 64


class DispatchMessages:
    """The worker -> dispatcher side of a `Dispatcher`."""

    def on_worker_message(self, worker_id: str, message, now_s: float) -> Outbound:
        if isinstance(message, CacheEventsReport):
            if worker_id in self._ready:
                self.router.index.apply(worker_id, message.events)
            return Outbound()
        if isinstance(message, CacheSnapshot):
            if worker_id in self._ready:
                self.router.index.replace(worker_id, message.hot_hashes, message.host_hashes)
            return Outbound()
        if isinstance(message, PrefixExported):
            return self._on_exported(worker_id, message)
        if isinstance(message, PrefixImported):
            self._observe_cost(worker_id, "import_s_per_block", message.elapsed_s, message.num_blocks)
            self.stats.num_transferred_blocks += message.num_blocks
            return Outbound()
        if isinstance(message, (TokenEvent, FinishEvent, ErrorEvent)):
            return self._on_event(worker_id, message, now_s)
        return Outbound()

    def _on_event(self, worker_id: str, event: EngineEvent, now_s: float) -> Outbound:
        request = self.requests.get(event.request_id)
        if request is None or request.worker_id != worker_id:
            return Outbound()  # cancelled, or a stale incarnation's event
        out = Outbound(deliveries=[event])
        if isinstance(event, TokenEvent):
            request.sent_token_ids.extend(event.token_ids)
            request.num_sent_chars += len(event.text)
            if request.num_cached_tokens is None:
                request.num_cached_tokens = event.num_cached_tokens
            if not request.token_sent:
                request.token_sent = True
                self.router.on_first_token(event.request_id)
            return out
        del self.requests[event.request_id]
        self._release(request)
        if (isinstance(event, FinishEvent) and request.item.num_resumed_tokens
                and request.num_cached_tokens is not None):   # the usage of the prompt the client waited on
            out.deliveries[0] = dataclasses.replace(event, num_cached_tokens=request.num_cached_tokens)
        if isinstance(event, FinishEvent) and event.prefill_s > 0 and not request.item.num_resumed_tokens:
            # (a resumed request's prefill also computed the output it resumed from: not a prompt's cost)
            num_computed = event.num_prompt_tokens - event.num_cached_tokens
            if num_computed >= MIN_MEASURED_PREFILL_TOKENS:
                self._observe_cost(worker_id, "prefill_s_per_token", event.prefill_s, num_computed)
        out.extend(self.pump(now_s))
        return out

    def _on_exported(self, worker_id: str, message: PrefixExported) -> Outbound:
        out = Outbound()
        transfer = self.transfers.finish(message.transfer_id)
        request = self.requests.get(transfer.request_id) if transfer is not None else None
        if request is None or request.worker_id != transfer.dst:
            if message.shm_name:
                out.unlink.append(message.shm_name)
            return out
        self._observe_cost(worker_id, "export_s_per_block", message.elapsed_s, message.num_blocks)
        if message.has_blocks:
            self.stats.num_transfers_done += 1
            item = request.item
            num_tokens = (message.first_block + message.num_blocks) * self.router.config.block_size
            out.sends.append((transfer.dst, ImportPrefix(
                message.transfer_id, item.tenant, item.session,
                tuple(item.prompt_token_ids[:num_tokens]), message.shm_name, message.num_blocks,
                message.payload, message.first_block)))
        out.sends.append((transfer.dst, request.item))
        return out

    def _observe_cost(self, worker_id: str, name: str, elapsed_s: float, num_units: int) -> None:
        """Fold a measured cost (seconds per block or per token) into the router's model."""
        if worker_id in self._ready:
            fold_cost(self.router.costs(worker_id), name, elapsed_s, num_units)
