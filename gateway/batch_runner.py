"""Runs the Batch API's batches: each request is sent to the gateway's own app, in this
process, as its tenant (an internal key), so it meets the same checks, limits, workers,
errors and metrics as a client's; at most `concurrency` requests of a batch at a time.

Invariants:
- every request of a batch gets one result line (its status code and body, or an error),
  appended as it finishes; a request turned away for the moment (429, 503) waits as
  `Retry-After` says and goes again, until the batch expires or is cancelled (which ends
  the wait at once); one the answer says never to retry (`x-should-retry: false`, or
  `insufficient_quota`) has that answer as its result at once;
- a request's body is sent as a client sends JSON, so it answers as the same body sent
  directly does (NaN and Infinity included, which Python's JSON reads);
- a batch ends `completed`, `cancelled` (its requests not yet sent are dropped),
  `expired` or `failed` (its input file was deleted, or fails a check added since, before
  it could go on), its results in its files first (gateway/batch_finish.py);
- a gateway stopped mid-batch goes on at its next start with the requests that have no
  result yet; batch requests are not agent steps, so they are not traced;
- a batch runs in one process at a time (gateway/batch_claims.py): gateways sharing a
  state directory each run the batches they claim, take up those a stopped one left,
  and stop one that another of them cancelled;
- while the batch's tenant is not configured (a reload removed it, or the gateway started
  without it) its requests wait unsent (one refused meanwhile for that goes again), and go
  on when the tenant is back, until the batch expires or is cancelled;
- with `yields`, while other requests are in flight (`load()` counts every request
  holding a slot, the batches' own included) at most one batch request runs at a time,
  whatever the number of batches: interactive agents keep the workers, and a batch still
  moves under constant traffic;
- a request whose body names no `service_tier` runs as "flex" on a local model
  (gateway/service_tiers.py): served after every interactive request wherever it waits
  (its queue, its prefill, its worker; `shards.tiered_queue`). A body's own tier is kept.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx

from gateway.batch_claims import ADOPT_EVERY_S, BatchClaims
from gateway.batch_lines import BATCH_HEADER, BatchRequest, batch_requests
from gateway.batch_finish import finish_batch, requests_to_go_on
from gateway.batch_retry import MAX_RETRY_WAIT_S, retry_wait_s
from gateway.batch_store import UNFINISHED, Batch, BatchStore, request_result, succeeded
from gateway.file_store import FileStore

if TYPE_CHECKING:
    from gateway.auth import KeyRing

log = logging.getLogger("stepahead.gateway")
TENANT_POLL_S = 1.0   # how often a batch whose tenant is not configured looks again
YIELD_POLL_S = 0.02


class BatchRunner:
    def __init__(self, store: BatchStore, files: FileStore, keys: Callable[[], "KeyRing"], concurrency: int,
                 clock: Callable[[], float] = time.time, *, load: Callable[[], int] | None = None) -> None:
        self.store, self.files, self.keys, self.concurrency, self.clock = store, files, keys, concurrency, clock
        self.load = load   # requests in flight gateway-wide; None: batches never yield
        self.num_in_flight = 0   # batch requests being sent, all batches together
        self._app = None
        self._tasks: dict[str, asyncio.Task] = {}
        self._running: dict[str, Batch] = {}   # the batches being run here: their records, kept current
        self._cancelled: set[str] = set()
        self._wakers: dict[str, asyncio.Event] = {}   # set when a running batch is cancelled: ends its waits
        self.claims = BatchClaims(store.results_dir.parent / "batch_claims")
        self._adopter: asyncio.Task | None = None

    def tenant_series(self, tenants) -> dict[tuple[str, tuple], float]:
        """/metrics gauges of `tenants`: their batches running here, and those batches'
        requests still without a result."""
        gauges: dict[tuple[str, tuple], float] = {}
        for tenant in tenants:
            running = [batch for batch in self._running.values() if batch.tenant == tenant]
            labels = (("tenant", tenant),)
            gauges[("stepahead_tenant_batches_running", labels)] = float(len(running))
            gauges[("stepahead_tenant_batch_requests_pending", labels)] = float(sum(
                max(0, batch.total - batch.completed - batch.failed) for batch in running))
        return gauges

    def current(self, batch: Batch) -> Batch:
        """The batch as it stands now: the running record when it runs here."""
        return self._running.get(batch.id, batch)

    async def start(self, app) -> None:
        """Go on with the batches a stopped gateway left unfinished, and from then on with
        those another gateway sharing the directory leaves (it stopped or died)."""
        self._app = app
        await self._adopt()
        self._adopter = asyncio.get_running_loop().create_task(self._adopt_every(ADOPT_EVERY_S))

    async def _adopt_every(self, period_s: float) -> None:
        while True:
            await asyncio.sleep(period_s)
            try:
                await self._adopt()
            except Exception:   # NOTE: the store failing (a full disk) must not end the looking
                log.exception("looking for batches to go on failed; trying again in %.0f s", period_s)

    async def _adopt(self) -> None:
        """Run the unfinished batches no process runs; stop here the ones this process runs
        that another gateway cancelled."""
        for batch in await self.store.unfinished():
            if batch.id not in self._tasks:
                self._launch(batch)
            elif batch.status == "cancelling" and batch.id not in self._cancelled:
                self._running[batch.id].moved_to("cancelling", self.clock())
                self._stop_sending(batch.id)

    async def stop(self) -> None:
        """Stop running batches where they are (they go on at the next start)."""
        if self._adopter is not None:
            self._adopter.cancel()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def create(self, batch: Batch) -> Batch:
        """Check the batch's input file and start it; a bad file fails it at once."""
        data = await self.files.read(batch.tenant, batch.input_file_id)
        requests, errors = await asyncio.to_thread(batch_requests, data, batch.endpoint)
        if errors:
            batch.errors = errors
            batch.moved_to("failed", self.clock())
        else:
            batch.total, batch.model = len(requests), requests[0].body["model"]
            batch.moved_to("in_progress", self.clock())
        await self.store.put(batch)
        if not errors:
            self._launch(batch, requests)
        return batch

    async def cancel(self, batch: Batch) -> Batch:
        batch = self.current(batch)
        if batch.status in ("validating", "in_progress"):
            batch.moved_to("cancelling", self.clock())
            await self.store.put(batch)
            self._stop_sending(batch.id)
            if batch.id not in self._tasks:   # not running here: finish it now (or its runner does)
                self._launch(batch)
        return batch

    def _stop_sending(self, batch_id: str) -> None:
        self._cancelled.add(batch_id)
        if batch_id in self._wakers:
            self._wakers[batch_id].set()

    def _launch(self, batch: Batch, requests: list[BatchRequest] | None = None) -> None:
        if self._app is None or batch.id in self._tasks or not self.claims.take(batch.id):
            return
        if batch.status == "cancelling":
            self._cancelled.add(batch.id)
        task = asyncio.get_running_loop().create_task(self._run(batch, requests))
        self._tasks[batch.id] = task
        self._running[batch.id] = batch
        self._wakers[batch.id] = asyncio.Event()
        if batch.id in self._cancelled:
            self._wakers[batch.id].set()

        def forget(_: asyncio.Task) -> None:
            self.claims.release(batch.id, finished=batch.status not in UNFINISHED)
            self._tasks.pop(batch.id, None)
            self._running.pop(batch.id, None)
            self._wakers.pop(batch.id, None)
        task.add_done_callback(forget)

    async def _run(self, batch: Batch, requests: list[BatchRequest] | None) -> None:
        try:
            if requests is None:
                kept = await self.store.get(batch.tenant, batch.id)
                if kept.status not in UNFINISHED:   # another gateway finished it before this one took its claim
                    batch.status = kept.status
                    return
                requests = await requests_to_go_on(self.store, self.files, batch, batch.id in self._cancelled,
                                                   self.clock)
                if requests is None:   # it failed, keeping what finished
                    return
            while True:   # until every request has a result, or the batch is cancelled or expired
                results = await self.store.results(batch.id)
                batch.completed = sum(succeeded(result) for result in results)
                batch.failed = len(results) - batch.completed
                done = {result["custom_id"] for result in results}
                pending = [request for request in requests if request.custom_id not in done]
                if not pending or batch.id in self._cancelled or self.clock() >= batch.expires_at:
                    break
                await self._send_all(batch, pending)
            await self._finish(batch, results, pending)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("batch %s stopped on an error; it goes on at the next start", batch.id)

    async def _send_all(self, batch: Batch, pending: list[BatchRequest]) -> None:
        keys = self.keys()
        key = keys.new_internal_key(batch.tenant)
        slots = asyncio.Semaphore(self.concurrency)
        running: set[asyncio.Task] = set()
        transport = httpx.ASGITransport(app=self._app)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://stepahead.batch",
                                         timeout=None) as client:
                async def one(request: BatchRequest) -> None:
                    try:
                        await self._yield_to_others()
                        if batch.id in self._cancelled:   # cancelled while it waited: not sent
                            return
                        self.num_in_flight += 1
                        try:
                            result = await self._send(client, key, batch, request)
                        finally:
                            self.num_in_flight -= 1
                    finally:
                        slots.release()
                    if result is None:   # its tenant was removed meanwhile: it goes again once the tenant is back
                        return
                    [result] = await self.store.append_results(batch.id, [result])
                    if succeeded(result):
                        batch.completed += 1
                    else:
                        batch.failed += 1
                    await self.store.put(batch)

                for request in pending:
                    await slots.acquire()
                    if not await self._tenant_present(batch) or batch.id in self._cancelled \
                            or self.clock() >= batch.expires_at:
                        slots.release()
                        break
                    task = asyncio.get_running_loop().create_task(one(request))
                    running.add(task)
                    task.add_done_callback(running.discard)
                await asyncio.gather(*list(running))
        finally:
            for task in running:
                task.cancel()
            keys.drop_internal_key(key)

    async def _yield_to_others(self) -> None:
        """Wait while other requests are in flight and a batch request runs already."""
        while self.load is not None and self.num_in_flight > 0 and self.load() > self.num_in_flight:
            await asyncio.sleep(YIELD_POLL_S)

    async def _tenant_present(self, batch: Batch) -> bool:
        """True once the batch's tenant is configured, waiting while it is not (a reload
        removed it, or the gateway started without it); False when the batch is cancelled
        or expires meanwhile. Its requests are not sent meanwhile, so none is lost to a 401."""
        if self.keys().has_tenant(batch.tenant):
            return True
        log.warning("batch %s waits: its tenant %r is not in the config; it goes on when the tenant is back "
                    "(or ends when it expires or is cancelled)", batch.id, batch.tenant)
        while not self.keys().has_tenant(batch.tenant):
            if batch.id in self._cancelled or self.clock() >= batch.expires_at:
                return False
            await self._wait_unless_cancelled(batch.id, min(TENANT_POLL_S, max(0.0, batch.expires_at - self.clock())))
        log.info("batch %s goes on: its tenant %r is back", batch.id, batch.tenant)
        return True

    async def _send(self, client: httpx.AsyncClient, key: str, batch: Batch, request: BatchRequest) -> dict | None:
        """The request's result; None when it was refused because its tenant was removed
        while it ran (it goes again once the tenant is back)."""
        headers = {"authorization": f"Bearer {key}", "content-type": "application/json", BATCH_HEADER: batch.id}
        while True:
            try:
                # NOTE: not httpx's `json=`, which refuses NaN: the text a client's JSON encoder sends,
                # compact and in UTF-8 (escapes could take a body near the size limit past it)
                content = json.dumps(request.body, ensure_ascii=False, separators=(",", ":")).encode()
                reply = await client.post(batch.endpoint, content=content, headers=headers)
                body = reply.json()
            except Exception as exc:   # NOTE: the app answers JSON; anything else is a bug to report per request
                return request_result(request.custom_id, None, None, "", {
                    "code": "internal_error", "message": f"{type(exc).__name__}: {exc}"})
            if reply.status_code == 401 and not self.keys().has_tenant(batch.tenant):
                return None
            result = request_result(request.custom_id, reply.status_code, body, reply.headers.get("x-request-id", ""),
                                    None)
            wait_s = retry_wait_s(reply.status_code, reply.headers, body)
            if wait_s is None or batch.id in self._cancelled or self.clock() + wait_s >= batch.expires_at:
                return result
            await self._wait_unless_cancelled(batch.id, min(wait_s, MAX_RETRY_WAIT_S))
            if batch.id in self._cancelled:   # cancelled while it waited: its last answer is its result
                return result

    async def _wait_unless_cancelled(self, batch_id: str, wait_s: float) -> None:
        try:
            await asyncio.wait_for(self._wakers[batch_id].wait(), wait_s)
        except asyncio.TimeoutError:
            pass

    async def _finish(self, batch: Batch, results: list[dict], unsent: list[BatchRequest]) -> None:
        """End the batch with the files of `results`; `unsent` are its requests without a result."""
        final = "cancelled" if batch.id in self._cancelled else "completed"
        await finish_batch(self.store, self.files, batch, results, unsent, final, None, self.clock)
        self._cancelled.discard(batch.id)
