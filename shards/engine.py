"""LocalEngine: one model served by N workers (local processes or Ray actors).

The gateway sees only this object. `generate(item)` is an async generator of
EngineEvents. Behind it: a router (prefix index + load + affinity), tenant-fair
admission queues, shared-prefix transfer between workers, and a supervisor that
health-checks, fences and restarts workers. The decision logic lives in pure objects
(`Dispatcher`, `Router`, `Supervisor`); this class only wires them to the transport,
the reader threads and the asyncio streams, all under one lock. Parts live in files of
their own, as base classes: the start and its cancellation (`shards.engine_start`), what
the engine reports (`shards.engine_reports`), what it does with each worker's messages and
exit (`shards.engine_messages`), changing the tenants' shares (`shards.engine_tenants`),
each request's stream of events (`shards.engine_streams`), and the supervision tick that
pings, fences and restarts workers (`shards.engine_supervision`).

Invariants:
- every request ends with exactly one terminal event (FinishEvent or ErrorEvent): a
  dead or fenced worker's requests go on elsewhere (from their last token sent, or
  from the start; `max_attempts` runs in all), else fail with "worker_died"; a request
  that waits too long fails with "overloaded"; `stop()` fails whatever is left — so no
  caller waits forever;
- a sampled request without a seed is given a random one (`WorkItem.seeded`), so a
  stream resumed on another worker draws what its uncut run would have drawn;
- closing the generator early (client gone) cancels the request on its worker, which
  releases its blocks; so does a reader that leaves `max_unread_tokens` unread (it
  stopped reading): what was queued is still read, then an ErrorEvent says why
  (shards/engine_streams.py); `num_generated` counts a request's tokens, read or not;
- messages from a fenced worker incarnation are ignored, and nothing is sent to it.
"""
from __future__ import annotations

import asyncio
import inspect
import itertools
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import AsyncIterator

from cache.hashing import tenant_salt
from cache.session_hashes import SessionHashes
from shards.dispatcher import DispatchConfig, Dispatcher
from shards.engine_options import check_engine_options
from shards.engine_reports import EngineReports
from shards.engine_messages import EngineMessages
from shards.engine_start import WORKER_START_TIMEOUT_S, EngineStart, EngineStartError
from shards.engine_streams import EngineStreams, RequestStream
from shards.engine_supervision import EngineSupervision
from shards.engine_tenants import EngineTenants
from shards.protocol import (ApplyForecast, CostProfile, EngineEvent, ErrorEvent, FinishEvent, Shutdown,
                             WorkerStats, WorkItem)
from shards.route_records import RouterConfig
from shards.router import Router
from shards.supervisor import Supervisor, SupervisorConfig
from shards.worker_config import DEFAULT_CHUNK_TOKENS, WorkerConfig

__all__ = ["EngineStartError", "LocalEngine"]

STOP_TIMEOUT_S = 5.0
RESERVATION_QUANTILE = 0.9
RESERVATION_SLACK_S = 2.0


class LocalEngine(EngineStart, EngineReports, EngineTenants, EngineMessages, EngineStreams, EngineSupervision):
    """One model on `num_workers` workers. Besides the model and cache sizes:

    - `transport`: "local" (processes, default) or "ray" (actors; `transport_options`
      go to `RayTransport`: address, num_cpus_per_worker, namespace);
    - `tenant_weights`: weighted fair queueing at the router and in every worker;
    - `max_queued_per_tenant` / `max_queued_requests`: admission bounds (past them a
      request ends at once with "rate_limit_exceeded" / "overloaded", retry_after_s set);
      `max_queue_wait_s`: a queued request fails with "overloaded" after this long;
    - `max_outstanding_per_worker`: requests sent to one worker before the router holds
      them (default 2 x max_running);
    - `decode_batch`: running requests a worker decodes in one forward pass (1: one at
      a time; shards/batched_decode.py);
    - `max_decode_stall_s`: while newcomers prefill, a running request is decoded
      before its wait for a token passes this bound, judged at prefill chunk boundaries
      (shards/stall_bound.py; default: not until the prefills are done). It rides a
      chunk's forward pass when `decodes_ride_chunks` (default true) and the model
      batches decodes; otherwise the chunks yield to a whole decode pass.
      `prefill_chunk_tokens`: prompt tokens per prefill chunk (default 128), the
      granularity of both and of tenant-fair prefill; `prefill_order`: which admitted
      prefill runs next, "deadline" (default: shortest remaining first, with aging) or
      "arrival" (shards/prefill_order.py);
    - `imbalance_threshold_tokens`, `routing` ("prefix", or the "round_robin" /
      "least_loaded" baselines), `prefix_transfer` (copy shared prefixes between
      workers when measured cheaper: shared memory locally, bytes in the messages
      under Ray), `tenant_homes` (place a tenant's new sessions on
      one worker; shards/router.py);
    - `health_timeout_s` / `ping_interval_s`: a ready worker silent this long is fenced;
    - `min_p_return`: a forecast reserves its session's worker from this probability;
    - `policy` / `policy_options`: the workers' cache policy (`cache.policies.make_policy`);
    - `prefix_caching=False`: nothing is reused or stored (the no-caching baseline);
    - `flex_blocks_evicted_first`: blocks only flex requests used leave a full tier before
      any other, whatever the policy (`cache.background_blocks`); False: like any block;
    - `reuse_probed_costs`: local workers skip their cost probe when an earlier start on
      this machine with the same settings stored one within a day (shards/probed_costs.py);
    - `device`: where each worker keeps the weights and the hot KV tier ("cpu";
      "cuda": the workers spread over the visible GPUs in turn; "cuda:N": all on GPU N);
      the host tier stays in CPU memory. `dtype`: of the weights and the KV cache
      ("float32", "bfloat16" — half the KV bytes per block — "float16", or "auto":
      bfloat16 where the device computes it natively, else float32; `choose_dtype`).
      A local engine settles "auto" at start, so `config.dtype` then names the dtype
      its workers use; a Ray worker settles it on its own node.
    """

    @classmethod
    def check_options(cls, options: Mapping) -> None:
        """Raise EngineOptionError (a ValueError naming the option) for keyword options
        this engine would refuse or that could not work."""
        known = [name for name, parameter in inspect.signature(cls.__init__).parameters.items()
                 if parameter.kind is inspect.Parameter.KEYWORD_ONLY]
        check_engine_options(options, known)

    def __init__(self, model: str = "smollm2", num_workers: int = 2, *, num_hot_blocks: int = 4096,
                 num_host_blocks: int = 0, block_size: int = 16, policy: str = "lru",
                 max_running: int = 8, decode_batch: int = 16, threads_per_worker: int | None = None,
                 transport: str = "local", transport_options: Mapping | None = None,
                 tenant_weights: Mapping[str, float] | None = None,
                 max_queued_per_tenant: int = 256, max_queued_requests: int = 1024,
                 max_outstanding_per_worker: int | None = None, max_queue_wait_s: float = 120.0,
                 imbalance_threshold_tokens: float = 2048.0, prefix_transfer: bool = True,
                 health_timeout_s: float = 30.0, ping_interval_s: float = 0.5,
                 min_p_return: float = 0.5, routing: str = "prefix", tenant_homes: bool = True,
                 policy_options: Mapping | None = None, prefix_caching: bool = True,
                 device: str = "cpu", dtype: str = "auto", max_decode_stall_s: float | None = None,
                 prefill_chunk_tokens: int = DEFAULT_CHUNK_TOKENS, decodes_ride_chunks: bool = True,
                 prefill_order: str = "deadline", reuse_probed_costs: bool = True,
                 flex_blocks_evicted_first: bool = True):
        threads = threads_per_worker or max(1, (os.cpu_count() or 2) // max(1, num_workers))
        weights = tuple(sorted((tenant_weights or {}).items()))
        self.config = WorkerConfig(model=model, device=device, dtype=dtype, num_hot_blocks=num_hot_blocks,
                                   num_host_blocks=num_host_blocks, block_size=block_size,
                                   policy=policy, max_running=max_running, decode_batch=decode_batch,
                                   num_threads=threads, max_decode_stall_s=max_decode_stall_s,
                                   prefill_chunk_tokens=prefill_chunk_tokens,
                                   decodes_ride_chunks=decodes_ride_chunks, prefill_order=prefill_order,
                                   tenant_weights=weights, prefix_caching=prefix_caching,
                                   flex_blocks_evicted_first=flex_blocks_evicted_first,
                                   policy_options=tuple(sorted(_frozen(policy_options or {}).items())))
        self.num_workers = num_workers
        self.model_id = model
        self.tokenizer = None
        self.max_context_tokens = 0
        self.supports_tools = False
        self.transport_name = transport
        self.min_p_return = min_p_return
        self._transport_options = dict(transport_options or {})
        self._transport = None
        self._prefix_transfer = prefix_transfer
        self._router_config = RouterConfig(policy=routing, block_size=block_size,
                                           slots_per_worker=max_running, tenant_weights=weights,
                                           imbalance_threshold_tokens=imbalance_threshold_tokens,
                                           tenant_homes=tenant_homes, num_hot_blocks=num_hot_blocks)
        outstanding = max_outstanding_per_worker or 2 * max_running
        self._dispatch_config = DispatchConfig(
            tenant_weights=weights, max_queued_per_tenant=max_queued_per_tenant,
            max_queued_requests=max_queued_requests, max_outstanding_per_worker=outstanding,
            max_outstanding_hard=2 * outstanding, max_queue_wait_s=max_queue_wait_s)
        self._dispatcher = Dispatcher(Router(self._router_config, routable=self._routable), self._dispatch_config)
        self._supervisor = Supervisor(SupervisorConfig(ping_interval_s=ping_interval_s,
                                                       health_timeout_s=health_timeout_s,
                                                       start_timeout_s=WORKER_START_TIMEOUT_S))
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._channels: dict[str, object] = {}
        self._stats: dict[str, WorkerStats] = {}
        self._placements: dict[str, tuple[str, str]] = {}  # worker id -> (device, dtype) as loaded
        self._probed_costs: dict[str, CostProfile] = {}  # worker id -> its first incarnation's probe
        self._reuse_probed_costs = reuse_probed_costs
        self.cost_probe = "pending"   # "probed" at this start, or "reused" from an earlier one
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, RequestStream]] = {}
        self._salts: dict[str, bytes] = {}
        self._session_hashes = SessionHashes(block_size)
        self._nonces = itertools.count()
        self._seeds = random.Random()   # its own: a caller's `random.seed` must not repeat our draws
        self._supervise_task: asyncio.Task | None = None
        self._down_since: dict[str, float] = {}   # worker id -> when it stopped, until it serves again
        self.on_worker_event: Callable[[str], None] | None = None   # shards/worker_events.py's lines
        self.on_start_progress: Callable[[str], None] | None = None   # ... and its start's
        self._start_error: str | None = None
        self._start_cancelled = threading.Event()
        self._stopping = False

    # --- lifecycle -----------------------------------------------------------------

    async def stop(self) -> None:
        with self._lock:
            self._stopping = True
            channels = list(self._channels.values())
            self._deliver([ErrorEvent(request_id, "the engine is shutting down", "shutting_down", retryable=True)
                           for request_id in self._streams])
        if self._supervise_task is not None:
            self._supervise_task.cancel()
        for channel in channels:
            channel.send(Shutdown())
        await asyncio.gather(*(asyncio.to_thread(channel.stop, STOP_TIMEOUT_S) for channel in channels))
        if self._transport is not None:
            await asyncio.to_thread(self._transport.close)

    # --- requests ----------------------------------------------------------------------------
    def _hashes(self, item: WorkItem) -> list:
        """The prompt's block hashes (on the event loop: a session's next step hashes only
        the blocks its last prompt did not have, cache/session_hashes.py)."""
        salt = self._salts.get(item.tenant)
        if salt is None:
            salt = self._salts[item.tenant] = tenant_salt(item.tenant)
        return self._session_hashes.hashes(item.tenant, item.session, item.prompt_token_ids, salt)

    async def generate(self, item: WorkItem) -> AsyncIterator[EngineEvent]:
        stream = RequestStream(item.request_id, self.max_unread_tokens, self._cut_unread)
        item = item.seeded(self._seeds.getrandbits(63))   # a sampled stream resumed elsewhere goes on as it would have
        item.enqueued_at_s = time.time()
        hashes = self._hashes(item)
        refusal = None
        with self._lock:
            if self._stopping:
                refusal = ErrorEvent(item.request_id, "the engine is shutting down", "shutting_down",
                                     retryable=True)
            elif item.request_id in self._streams:
                refusal = ErrorEvent(item.request_id, "duplicate request id", "invalid_request")
            else:
                self._streams[item.request_id] = (asyncio.get_running_loop(), stream)
                self._perform(self._dispatcher.submit(item, hashes, time.monotonic(), room=item.queue_room))
        if refusal is not None:
            yield refusal
            return
        finished = False
        try:
            while True:
                event = await stream.get()
                if isinstance(event, (FinishEvent, ErrorEvent)):
                    finished = True
                    if isinstance(event, FinishEvent) and event.finish_reason == "cancelled":
                        return
                    yield event
                    return
                yield event
        finally:
            with self._lock:
                self._streams.pop(item.request_id, None)
                if not finished:
                    self._perform(self._dispatcher.cancel(item.request_id))

    def apply_forecast(self, forecast) -> str | None:
        """Hand a session's forecast (cache.forecast.Forecast) to the worker holding the
        session's KV; when a return is likely, reserve that worker for the session until
        the forecast's late return estimate. Returns the worker id, or None."""
        now = time.monotonic()
        eta_s = forecast.eta_s(RESERVATION_QUANTILE)
        with self._lock:
            router = self._dispatcher.router
            worker_id = router.session_worker(forecast.session)
            if worker_id is None:
                return None
            if eta_s is not None and forecast.p_return(eta_s) >= self.min_p_return:
                router.reserve(forecast.session, now + eta_s + RESERVATION_SLACK_S, now)
            self._channels[worker_id].send(ApplyForecast(forecast))
            return worker_id


def _frozen(options: Mapping) -> dict:
    """Policy options as hashable values (a config is frozen): mappings become sorted
    tuples of pairs, lists become tuples."""
    frozen = {}
    for key, value in options.items():
        if isinstance(value, Mapping):
            value = tuple(sorted(value.items()))
        elif isinstance(value, list):
            value = tuple(value)
        frozen[key] = value
    return frozen
