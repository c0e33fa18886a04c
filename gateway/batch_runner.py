"""Runs the Batch API's batches: each request is sent to the gateway's own app, in this
process, as its tenant (an internal key), so it meets the same checks, limits, workers,
errors and metrics as a client's; at most `concurrency` requests of a tenant's batches at
a time, shared by them round-robin (gateway/batch_turns.py), and at most
`running_per_tenant()` of its batches running at once, the others waiting `validating`
(gateway/batch_places.py).

Invariants:
- every request of a batch gets one result line (its status code and body, or an error),
  appended as it finishes; a request turned away for the moment (429, 503) waits as
  `Retry-After` says and goes again, until the batch expires or is cancelled (which ends
  the wait at once); one the answer says never to retry (`x-should-retry: false`, or
  `insufficient_quota`) has that answer as its result at once;
- a request's body is sent as a client sends JSON, so it answers as the same body sent
  directly does;
- a batch ends `completed`, `cancelled` (its requests not yet finished are dropped, those
  with the app given up: it ends within moments),
  `expired` or `failed` (its input file was deleted, or fails a check added since, before
  it could go on), its results in its files first (gateway/batch_finish.py);
- a running batch holds its input file open and, in memory, each request's place in it
  (gateway/batch_input.py), not its body: a run of requests is read from the file just
  before it is sent; a batch of `TRIM_AFTER_LINES` or more gives its freed memory back as
  it ends (gateway/freed_memory.py);
- a batch beyond its tenant's running places waits `validating` (its file checked, its
  `total` known, nothing sent, no file held open: its input is kept by a link to the file's
  bytes, so a file deleted meanwhile is still read, gateway/batch_input.py) and starts,
  oldest first, when one of the tenant's batches stops running here; it waits so across a
  restart, and a cancel ends it at once;
- a gateway stopped mid-batch goes on at its next start with the requests that have no
  result yet; batch requests are not agent steps, so they are not traced;
- a batch whose results cannot be kept (a full disk) stops sending (gateway/batch_sending.py),
  logged at most once a minute whatever the number of requests or batches, and goes on
  like a stopped one, here within `ADOPT_EVERY_S` (or at the next start), with the
  requests without a result: no result kept is lost, none is written twice;
- a batch runs in one process at a time (gateway/batch_claims.py): gateways sharing a
  state directory each run the batches they claim, take up those a stopped one left,
  and stop one that another of them cancelled within `cancel_look_s` (gateway/batch_adoption.py):
  once the store holds a batch `cancelling` it ends `cancelled`, never `completed`, with the
  cancel's `cancelling_at`, and every gateway answers it `cancelling` meanwhile (QA231 F1);
- while the batch's tenant is not configured (a reload removed it, or the gateway started
  without it) its requests wait unsent (one refused meanwhile for that goes again), and go
  on when the tenant is back, until the batch expires or is cancelled; meanwhile this
  process holds no claim on it (none of its requests in flight), so a gateway sharing the
  directory that has the tenant can run it; it goes on here with the claim taken again;
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
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from cache.repeated_failures import RepeatedFailures
from gateway.batch_adoption import BatchAdoption
from gateway.batch_claims import ADOPT_EVERY_S, CANCEL_LOOK_S, BatchClaims
from gateway.batch_places import RunningPlaces
from gateway.batch_input import BatchInput, BatchLine, open_input
from gateway.batch_sending import BatchSending, LinesBeingSent, ResultNotKept
from gateway.batch_turns import LineTurns
from gateway.batch_waits import BatchWaits
from gateway.batch_finish import finish_batch, input_to_go_on
from gateway.batch_store import UNFINISHED, Batch, BatchStore
from gateway.file_store import FileStore
from gateway.freed_memory import release_freed_memory

if TYPE_CHECKING:
    from gateway.auth import KeyRing

log = logging.getLogger("stepahead.gateway")
TRIM_AFTER_LINES = 1000   # a batch of this many requests gives its freed memory back when it ends


class BatchRunner(BatchAdoption, BatchSending, BatchWaits):
    def __init__(self, store: BatchStore, files: FileStore, keys: Callable[[], "KeyRing"], concurrency: int,
                 clock: Callable[[], float] = time.time, *, load: Callable[[], int] | None = None,
                 running_per_tenant: Callable[[], int] = lambda: 4, cancel_look_s: float = CANCEL_LOOK_S) -> None:
        self.store, self.files, self.keys, self.concurrency, self.clock = store, files, keys, concurrency, clock
        self.cancel_look_s = cancel_look_s   # how often the batches running here look for a cancel made elsewhere
        self.places = RunningPlaces(running_per_tenant)   # the batches each tenant runs at once
        self._line_turns: dict[str, LineTurns] = {}   # a tenant's batches' turns to send
        self.load = load   # requests in flight gateway-wide; None: batches never yield
        self.num_in_flight = 0   # batch requests being sent, all batches together
        self.others_seen_s = float("-inf")   # when other requests were last seen in flight (`_yield_to_others`)
        self._app = None
        self._tasks: dict[str, asyncio.Task] = {}
        self._running: dict[str, Batch] = {}   # the batches being run here: their records, kept current
        self._cancelled: set[str] = set()
        self._wakers: dict[str, asyncio.Event] = {}   # set when a running batch is cancelled: ends its waits
        self._being_sent: dict[str, LinesBeingSent] = {}   # a batch's requests with the app now
        self.claims = BatchClaims(store.results_dir.parent / "batch_claims")
        self._adopter: asyncio.Task | None = None
        self.is_stopping = False   # the gateway's stop began (`begin_stop`): no request is sent any more
        self._not_kept = RepeatedFailures(log, expected=(ResultNotKept,))   # a full disk: one line a minute

    def tenant_series(self, tenants) -> dict[tuple[str, tuple], float]:
        """/metrics gauges of `tenants`: their batches running here, and those batches'
        requests still without a result."""
        gauges: dict[tuple[str, tuple], float] = {}
        for tenant in tenants:
            running = [batch for batch in self._running.values()
                       if batch.tenant == tenant and self.claims.holds(batch.id) and batch.status != "validating"]
            labels = (("tenant", tenant),)
            gauges[("stepahead_tenant_batches_running", labels)] = float(len(running))
            gauges[("stepahead_tenant_batch_requests_pending", labels)] = float(sum(
                max(0, batch.total - batch.completed - batch.failed) for batch in running))
        return gauges

    def current(self, batch: Batch) -> Batch:
        """The batch as it stands now, `batch` its record just read from the store: the running
        record when it runs here (its claim held), made `cancelling` if the record says another
        gateway cancelled it (`_cancelled_elsewhere`); the record itself once it has ended."""
        if batch.id not in self._running or not self.claims.holds(batch.id) or batch.status not in UNFINISHED:
            return batch
        self._cancelled_elsewhere(batch)
        return self._running[batch.id]

    def begin_stop(self) -> None:
        """The gateway's stop began (at the signal, before the connections drain): no
        request of any batch is sent from now on, none is adopted; those in flight finish
        (their results kept) if the drain lets them, and `stop` cancels what is left. The
        batches go on at the next start (QA125: lines kept starting through the drain)."""
        self.is_stopping = True
        if self._adopter is not None:
            self._adopter.cancel()

    async def stop(self) -> None:
        """Stop running batches where they are (they go on at the next start)."""
        if self._adopter is not None:
            self._adopter.cancel()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def create(self, batch: Batch, served: Collection[str] | None = None) -> Batch:
        """Check the batch's input file (its model among `served`, when given) and start it, or
        have it wait `validating` for a place (its file closed meanwhile); a bad file fails it at
        once. A checked file's bytes are linked for the batch once its record is kept
        (`BatchStore.keep_input`): it reads them when it starts or goes on, the file deleted or not."""
        batch_input, errors = await open_input(self.files, batch.tenant, batch.input_file_id, batch.endpoint, served)
        if errors:
            batch.errors = errors
            batch.moved_to("failed", self.clock())
        else:
            batch.total, batch.model = len(batch_input.lines), batch_input.model
            if self.places.try_hold(batch.tenant, batch.id):
                batch.moved_to("in_progress", self.clock())
            else:   # it waits `validating`: its input (through its link) is opened again when it starts
                batch_input.close()
        try:
            await self.store.put(batch)
        except BaseException:
            self.places.release(batch.tenant, batch.id)
            batch_input.close()
            raise
        if not errors:
            try:   # (no link, False or the store stopping: it reads its file by id, as before links)
                with contextlib.suppress(Exception):
                    await self.store.keep_input(batch.id, batch_input.path)
            finally:   # (its record is kept: it runs, or waits, even if this call was cancelled meanwhile)
                self._launch(batch, None if batch.status == "validating" else batch_input)
        return batch

    async def cancel(self, batch: Batch) -> Batch:
        batch = self.current(batch)
        if batch.status in ("validating", "in_progress"):
            batch.moved_to("cancelling", self.clock())
            kept = await self.store.put(batch)
            if kept is not None and kept.status != "cancelling":   # it ended meanwhile (on another gateway)
                return kept
            self._stop_sending(batch.id)
            if batch.id not in self._tasks:   # not running here: finish it now (or its runner does)
                self._launch(batch)
        return batch

    def _stop_sending(self, batch_id: str) -> None:
        """No further request of the batch is sent; those waiting to be sent again, or for
        a slot in its tenant's limiter, are given up (those admitted finish)."""
        self._cancelled.add(batch_id)
        if batch_id in self._wakers:
            self._wakers[batch_id].set()
        if batch_id in self._being_sent:
            self._being_sent[batch_id].give_up()
        if batch_id in self._running:
            tenant = self._running[batch_id].tenant
            self.places.drop(tenant, batch_id)
            if tenant in self._line_turns:
                self._line_turns[tenant].drop(batch_id)

    def _launch(self, batch: Batch, batch_input: BatchInput | None = None) -> None:
        """Run the batch here, its claim taken; without its tenant, unclaimed (`_claim_to_go_on`).
        Its `batch_input`, when given, is the run's to close (else closed here)."""
        if self._app is None or batch.id in self._tasks \
                or (self.keys().has_tenant(batch.tenant) or batch.status == "cancelling") \
                and not self.claims.take(batch.id):
            if batch_input is not None:
                batch_input.close()
            if batch.id not in self._tasks:
                self.places.release(batch.tenant, batch.id)
            return
        if batch.status not in ("validating", "cancelling"):   # started: it runs, past the cap if need be
            self.places.hold(batch.tenant, batch.id)
        if batch.status == "cancelling":
            self._cancelled.add(batch.id)
        task = asyncio.get_running_loop().create_task(self._run(batch, batch_input))
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
            self.places.release(batch.tenant, batch.id)
            if not any(running.tenant == batch.tenant for running in self._running.values()):
                self._line_turns.pop(batch.tenant, None)
        task.add_done_callback(forget)

    async def _run(self, batch: Batch, batch_input: BatchInput | None) -> None:
        """Run the batch until it ends or stops here; `batch_input` (None: opened now) is closed then."""
        try:
            if not self.claims.holds(batch.id) and not await self._claim_to_go_on(batch):
                return
            if not await self._start_when_placed(batch):   # the stop began while it waited: it waits again
                return
            if batch_input is None:
                if not await self._refreshed(batch):   # another gateway finished it before this one took its claim
                    return
                batch_input = await input_to_go_on(self.store, self.files, batch, batch.id in self._cancelled,
                                                   self.clock)
                if batch_input is None:   # it failed, keeping what finished
                    return
            while True:   # until every request has a result, or the batch is cancelled or expired
                # (its results' ids and counts, not the results: QA153 saw a batch's memory stay high)
                done, batch.completed, batch.failed = await self.store.progress(batch.id)
                pending = [line for line in batch_input.lines if line.custom_id not in done]
                del done   # (not held while the requests run: read again after)
                if not pending or batch.id in self._cancelled or self.clock() >= batch.expires_at:
                    break
                if self.is_stopping:   # unfinished: it goes on at the next start
                    return
                if not self.keys().has_tenant(batch.tenant):   # a reload removed it: wait without the claim
                    self.claims.release(batch.id, finished=False)
                    if not await self._claim_to_go_on(batch) or not await self._refreshed(batch):
                        return
                    continue   # its results read again: another gateway may have run some meanwhile
                await self._send_read(batch, batch_input, pending)
            if batch.id not in self._cancelled:   # a cancel made elsewhere since the last look: it ends cancelled
                self._cancelled_elsewhere(await self.store.get(batch.tenant, batch.id))
            await self._finish(batch, pending)
            if batch.total >= TRIM_AFTER_LINES:   # its results and requests freed: give the memory back
                await asyncio.to_thread(release_freed_memory)
        except asyncio.CancelledError:
            raise
        except ResultNotKept:
            self._not_kept.log("keep", "batch %s stopped: a result could not be kept; it goes on within %g s (or at "
                               "the next start) with its requests without a result", batch.id, ADOPT_EVERY_S)
        except Exception:
            log.exception("batch %s stopped on an error; it goes on at the next start", batch.id)
        finally:
            if batch_input is not None:
                batch_input.close()

    async def _refreshed(self, batch: Batch) -> bool:
        """Read the batch's record again, into the running one (what another gateway made of
        it while this one held no claim, a cancel included); False when it has ended."""
        kept = await self.store.get(batch.tenant, batch.id)
        for field in dataclasses.fields(Batch):
            setattr(batch, field.name, getattr(kept, field.name))
        if batch.status == "cancelling":
            self._stop_sending(batch.id)
        return batch.status in UNFINISHED

    async def _finish(self, batch: Batch, unsent: list[BatchLine]) -> None:
        """End the batch with the files of its results (read from the store a line at a
        time); `unsent` are its requests without one."""
        final = "cancelled" if batch.id in self._cancelled else "completed"
        await finish_batch(self.store, self.files, batch, None, unsent, final, None, self.clock)
        self._cancelled.discard(batch.id)
