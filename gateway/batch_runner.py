"""Runs the Batch API's batches: each request is sent to the gateway's own app, in this
process, as its tenant (an internal key), so it meets the same checks, limits, workers,
errors and metrics as a client's; at most `concurrency` requests of a batch at a time.

Invariants:
- every request of a batch gets one result line (its status code and body, or an error),
  appended as it finishes; a request turned away for the moment (429, 503) waits as
  `Retry-After` says and goes again, until the batch expires;
- a batch ends `completed`, `cancelled` (its requests not yet sent are dropped) or
  `expired` (those are in the error file, `batch_expired`); then its output file holds the
  2xx results and its error file the others, each as OpenAI writes them;
- a gateway stopped mid-batch goes on at its next start with the requests that have no
  result yet; batch requests are not agent steps, so they are not traced;
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

from gateway.batch_lines import BATCH_HEADER, BatchRequest, batch_requests
from gateway.batch_store import Batch, BatchStore
from gateway.errors import ApiError
from gateway.file_store import FileStore
from gateway.ids import random_hex

if TYPE_CHECKING:
    from gateway.auth import KeyRing

log = logging.getLogger("stepahead.gateway")
MAX_RETRY_WAIT_S = 30.0
YIELD_POLL_S = 0.02


def _result(custom_id: str, status: int | None, body: object, request_id: str, error: dict | None) -> dict:
    return {"id": f"batch_req_{random_hex(32)}", "custom_id": custom_id,
            "response": None if status is None else {"status_code": status, "request_id": request_id, "body": body},
            "error": error}


def _is_quota_refusal(body: object) -> bool:
    """A 429 that waiting does not cure: the tenant's token budget is spent."""
    return isinstance(body, dict) and isinstance(body.get("error"), dict) \
        and body["error"].get("code") == "insufficient_quota"


def _succeeded(result: dict) -> bool:
    return result["response"] is not None and 200 <= result["response"]["status_code"] < 300


def summed_usage(results: list[dict]) -> dict:
    """The token usage of `results` as the Batch API reports it, from each body's own
    (`prompt_tokens` / `completion_tokens`, or the Responses API's `input_tokens` /
    `output_tokens`)."""
    total = {"input": 0, "output": 0, "cached": 0}
    for result in results:
        usage = result["response"]["body"].get("usage") if isinstance(result["response"]["body"], dict) else None
        if not isinstance(usage, dict):
            continue
        total["input"] += usage.get("prompt_tokens", usage.get("input_tokens", 0)) or 0
        total["output"] += usage.get("completion_tokens", usage.get("output_tokens", 0)) or 0
        details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
        total["cached"] += details.get("cached_tokens", 0) or 0
    return {"input_tokens": total["input"], "input_tokens_details": {"cached_tokens": total["cached"]},
            "output_tokens": total["output"], "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": total["input"] + total["output"]}


def _jsonl(results: list[dict]) -> bytes:
    return "".join(json.dumps(result, ensure_ascii=False) + "\n" for result in results).encode()


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
        """Go on with the batches a stopped gateway left unfinished."""
        self._app = app
        for batch in await self.store.unfinished():
            self._launch(batch)

    async def stop(self) -> None:
        """Stop running batches where they are (they go on at the next start)."""
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
            self._cancelled.add(batch.id)
            if batch.id not in self._tasks:   # not running here: finish it now
                self._launch(batch)
        return batch

    def _launch(self, batch: Batch, requests: list[BatchRequest] | None = None) -> None:
        if self._app is None or batch.id in self._tasks:
            return
        if batch.status == "cancelling":
            self._cancelled.add(batch.id)
        task = asyncio.get_running_loop().create_task(self._run(batch, requests))
        self._tasks[batch.id] = task
        self._running[batch.id] = batch

        def forget(_: asyncio.Task) -> None:
            self._tasks.pop(batch.id, None)
            self._running.pop(batch.id, None)
        task.add_done_callback(forget)

    async def _run(self, batch: Batch, requests: list[BatchRequest] | None) -> None:
        try:
            if requests is None:
                try:
                    data = await self.files.read(batch.tenant, batch.input_file_id)
                except ApiError as error:
                    if error.status != 404:
                        raise
                    await self._fail(batch, "input_file_missing", f"The input file {batch.input_file_id} was deleted "
                                     "before the batch finished; its requests without a result cannot run.")
                    return
                requests, _ = await asyncio.to_thread(batch_requests, data, batch.endpoint)
            batch.total = len(requests)
            while True:   # until every request has a result, or the batch is cancelled or expired
                results = await self.store.results(batch.id)
                batch.completed = sum(_succeeded(result) for result in results)
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
                    await self.store.append_results(batch.id, [result])
                    if _succeeded(result):
                        batch.completed += 1
                    else:
                        batch.failed += 1
                    await self.store.put(batch)

                for request in pending:
                    await slots.acquire()
                    if batch.id in self._cancelled or self.clock() >= batch.expires_at:
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

    async def _send(self, client: httpx.AsyncClient, key: str, batch: Batch, request: BatchRequest) -> dict:
        headers = {"authorization": f"Bearer {key}", BATCH_HEADER: batch.id}
        while True:
            try:
                reply = await client.post(batch.endpoint, json=request.body, headers=headers)
                body = reply.json()
            except Exception as exc:   # NOTE: the app answers JSON; anything else is a bug to report per request
                return _result(request.custom_id, None, None, "", {"code": "internal_error",
                                                                   "message": f"{type(exc).__name__}: {exc}"})
            try:
                wait_s = max(0.1, float(reply.headers.get("retry-after", "1")))
            except ValueError:
                wait_s = 1.0
            if reply.status_code in (429, 503) and self.clock() + wait_s < batch.expires_at \
                    and batch.id not in self._cancelled and not _is_quota_refusal(body):
                await asyncio.sleep(min(wait_s, MAX_RETRY_WAIT_S))
                continue
            return _result(request.custom_id, reply.status_code, body, reply.headers.get("x-request-id", ""), None)

    async def _fail(self, batch: Batch, code: str, message: str) -> None:
        batch.errors = [{"code": code, "message": message, "param": None, "line": None}]
        batch.moved_to("failed", self.clock())
        await self.store.put(batch)
        await self.store.drop_results(batch.id)
        log.warning("batch %s failed: %s", batch.id, message)

    async def _finish(self, batch: Batch, results: list[dict], unsent: list[BatchRequest]) -> None:
        """Write the output and error files of `results` and end the batch; `unsent` are
        its requests without a result."""
        final = "cancelled" if batch.id in self._cancelled else "completed"
        if unsent and final == "completed":   # `_run` sends every request unless the window passed
            final = "expired"
            log.warning("batch %s expired with %d of its %d requests not sent", batch.id, len(unsent), batch.total)
            results += [_result(request.custom_id, None, None, "", {
                "code": "batch_expired", "message": "This request could not be executed before the completion window "
                "expired."}) for request in unsent]
        batch.moved_to("finalizing", self.clock())
        await self.store.put(batch)
        succeeded = [result for result in results if _succeeded(result)]
        failed = [result for result in results if not _succeeded(result)]
        if succeeded:
            batch.output_file_id = (await self.files.add_bytes(
                batch.tenant, f"{batch.id}_output.jsonl", "batch_output", _jsonl(succeeded),
                batch.output_expires_after_s)).id
        if failed:
            batch.error_file_id = (await self.files.add_bytes(
                batch.tenant, f"{batch.id}_error.jsonl", "batch_output", _jsonl(failed),
                batch.output_expires_after_s)).id
        batch.completed, batch.failed = len(succeeded), len(failed)
        batch.usage = summed_usage(succeeded)
        batch.moved_to(final, self.clock())
        await self.store.put(batch)
        await self.store.drop_results(batch.id)
        self._cancelled.discard(batch.id)
