"""How a batch's requests are sent (a mixin of `BatchRunner`, gateway/batch_runner.py, whose
invariants these keep): at most `concurrency` of a tenant's batches at a time, each to the gateway's
own app as its tenant, a request turned away for the moment sent again as `Retry-After`
says, and, with `yields`, one batch request at a time while other requests are in flight
(or were, less than YIELD_GRACE_S ago). Each is sent in a `BATCH_LINE` context, so its
tenant's limiter serves it after the tenant's interactive requests, never from its queue
(gateway/limits.py).

Invariants:
- a tenant's batches send through one `LineTurns` (gateway/batch_turns.py): at most
  `concurrency` requests of all its batches with the app at once, the turns handed to its
  batches round-robin, so each running batch makes progress;
- a cancelled batch's requests with the app (waiting for a slot in its tenant's limiter,
  or admitted and running) are given up at the cancel, without a result line, as its
  requests not yet sent are: a cancel ends the batch within moments, and a result kept
  before it stays (completed + failed = the lines of its files);
- a request's slot is held until its result line is kept, so a run stopped mid-batch
  leaves at most `concurrency` requests sent without a result (they go again at the next
  start, here or on the gateway that takes the batch up);
- a `/v1/responses` line that does not set `store` is sent with `store: false`: its result
  is in the output file, and stored it would push the tenant's own stored responses out of
  its `responses_per_tenant` store (QA153: an 1,100-line batch broke its agents'
  `previous_response_id` chains); a line that sets `store` is sent as written;
- a result that cannot be kept (a full disk) stops the sending: no further request of
  the batch is sent, those in flight finish (their results kept if they can be), and
  `_send_all` raises `ResultNotKept`; the batch goes on later, as after a stop, with the
  requests without a result. Every request's failure is retrieved (none is left to
  asyncio's "Task exception was never retrieved").
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

import httpx

from gateway.batch_input import CHUNK_LINES, BatchInput, BatchLine
from gateway.batch_lines import BATCH_HEADER, BatchRequest
from gateway.batch_retry import MAX_RETRY_WAIT_S, retry_wait_s
from gateway.batch_store import Batch, request_result, succeeded
from gateway.batch_line_turn import BATCH_LINE, BatchLineTurn
from gateway.batch_turns import LineTurns

YIELD_POLL_S = 0.02
YIELD_GRACE_S = 0.25   # how long other requests must be gone before a second batch request starts
YIELD_CONFIRM_S = 2 * YIELD_POLL_S   # how long one wait must itself see them gone
RESPONSES_ENDPOINT = "/v1/responses"


def sent_body(endpoint: str, body: dict) -> dict:
    """The body a line is sent with: as written, but a `/v1/responses` line that does
    not set `store` is not stored (`store: false`; its result is in the output file)."""
    if endpoint == RESPONSES_ENDPOINT and "store" not in body:
        return {**body, "store": False}
    return body


class ResultNotKept(Exception):
    """A request's result could not be kept (appended, or the batch's record saved): the
    batch stopped sending; the failure is its `__cause__`."""


@dataclass(slots=True)
class LinesBeingSent:
    """A batch's requests being sent now: each sending task's turn in its tenant's limiter.
    A task is here only while its request is with the app (not while it waits to send
    again or keeps its result), so giving it up cancels nothing but that request."""

    turns: dict[asyncio.Task, BatchLineTurn] = field(default_factory=dict)
    given_up: set[asyncio.Task] = field(default_factory=set)

    def give_up(self) -> None:
        """Cancel the requests with the app, admitted or not (the batch was cancelled):
        their results are dropped (QA162 N1: lines a local engine kept waiting held a
        cancelled batch `cancelling` for 26-38 s)."""
        for task, turn in self.turns.items():
            if task not in self.given_up:
                self.given_up.add(task)
                turn.is_given_up = True   # (the app counts it as a client gone: respond.py)
                task.cancel()


class BatchSending:
    """`BatchRunner`'s sending: uses its `store`, `keys`, `concurrency`, `clock`, `load`,
    `num_in_flight`, `others_seen_s`, `is_stopping`, `_app`, `_cancelled`, `_cancelled_elsewhere`, `_wakers`,
    `_line_turns` (a tenant's `LineTurns`) and `_being_sent` (a batch's `LinesBeingSent`,
    by id, while it sends)."""

    __slots__ = ()

    async def _send_all(self, batch: Batch, pending: list[BatchRequest]) -> None:
        keys = self.keys()
        key = keys.new_internal_key(batch.tenant)
        slots = asyncio.Semaphore(self.concurrency)
        running: set[asyncio.Task] = set()
        failures: list[BaseException] = []   # of the requests' tasks: the first one stops the sending
        transport = httpx.ASGITransport(app=self._app)
        being_sent = self._being_sent[batch.id] = LinesBeingSent()
        turns = self._line_turns.setdefault(batch.tenant, LineTurns(self.concurrency))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://stepahead.batch",
                                         timeout=None) as client:
                async def one(request: BatchRequest) -> None:
                    # NOTE: the slot is held until the result is kept, so a stop leaves at most
                    # `concurrency` requests sent without a result (they go again)
                    try:
                        if not await turns.take(batch.id):   # the batch cancelled while it waited its turn
                            return
                        try:
                            await self._yield_to_others(batch.id)
                            if batch.id in self._cancelled or self.is_stopping:   # cancelled, or the gateway
                                return                                            # stopping, while it waited
                            self.num_in_flight += 1
                            try:
                                result = await self._send(client, key, batch, request, being_sent)
                            except asyncio.CancelledError:   # given up with the app (the batch cancelled):
                                task = asyncio.current_task()   # no result (unless the gateway stops)
                                if task in being_sent.given_up and task.uncancel() == 0:
                                    return
                                raise
                            finally:
                                self.num_in_flight -= 1
                        finally:
                            turns.give_back()
                        if result is None:   # its tenant was removed meanwhile: it goes again once it is back
                            return
                        try:
                            [result] = await self.store.append_results(batch.id, [result])
                            if succeeded(result):
                                batch.completed += 1
                            else:
                                batch.failed += 1
                            kept = await self.store.put(batch)
                        except Exception as exc:   # a full disk (the store logs it): the batch stops
                            raise ResultNotKept(f"{type(exc).__name__}: {exc}") from exc
                        self._cancelled_elsewhere(kept)   # (the store holds it cancelled by another gateway)
                    except Exception as exc:   # NOTE: kept before the slot is free, so no further request goes
                        failures.append(exc)
                    finally:
                        slots.release()

                for request in pending:
                    await slots.acquire()
                    if failures or self.is_stopping or not self.keys().has_tenant(batch.tenant) \
                            or batch.id in self._cancelled or self.clock() >= batch.expires_at:   # (the tenant
                        # gone: `_run` waits for it; the gateway stopping: the rest go on at the next start)
                        slots.release()
                        break
                    task = asyncio.get_running_loop().create_task(one(request))
                    running.add(task)
                    task.add_done_callback(running.discard)
                await asyncio.gather(*list(running))   # (those in flight finish: each result that can be is kept)
                if failures:
                    raise failures[0]
        finally:
            for task in running:
                task.cancel()
            keys.drop_internal_key(key)
            if self._being_sent.get(batch.id) is being_sent:
                del self._being_sent[batch.id]

    async def _send_read(self, batch: Batch, batch_input: BatchInput, pending: list[BatchLine]) -> None:
        """Send `pending` a run of lines at a time, each run read from the input file just before
        (off the event loop): at most one run's bodies in memory. Stops between runs when the batch
        cannot go on now (cancelled, expired, its tenant removed, the gateway stopping)."""
        for lines in batch_input.chunks(pending, max(CHUNK_LINES, 4 * self.concurrency)):
            requests = await asyncio.to_thread(batch_input.requests, lines)
            await self._send_all(batch, requests)
            del requests
            if batch.id in self._cancelled or self.is_stopping or not self.keys().has_tenant(batch.tenant) \
                    or self.clock() >= batch.expires_at:
                return

    async def _yield_to_others(self, batch_id: str) -> None:
        """While a batch request runs already, wait until other requests have been gone for
        YIELD_GRACE_S since last seen in flight, and for YIELD_CONFIRM_S of this wait's own
        looks: an agent sending its steps back to back leaves gaps of milliseconds between
        them, which are no quiet time (QA90), and a batch request sent but not yet admitted
        (or done but not yet answered) hides one other request from `load` for a moment, so
        one quiet look proves nothing (QA99: a second one started 0.03 s after the batch was
        made). Real time, whatever `clock` the batch reads. Ends at once when the batch is
        cancelled or the gateway stops (QA141: a cancelled batch's request waiting here kept it
        `cancelling` while another batch and interactive requests ran)."""
        loop = asyncio.get_running_loop()
        quiet_since_s = None
        while self.load is not None and self.num_in_flight > 0 and batch_id not in self._cancelled \
                and not self.is_stopping:
            now_s = loop.time()
            if self.load() > self.num_in_flight:
                self.others_seen_s, quiet_since_s = now_s, None
            elif quiet_since_s is None:
                quiet_since_s = now_s
            elif now_s - quiet_since_s >= YIELD_CONFIRM_S and now_s - self.others_seen_s >= YIELD_GRACE_S:
                return
            await asyncio.sleep(YIELD_POLL_S)

    async def _send(self, client: httpx.AsyncClient, key: str, batch: Batch, request: BatchRequest,
                    being_sent: LinesBeingSent) -> dict | None:
        """The request's result; None when it was refused because its tenant was removed
        while it ran (it goes again once the tenant is back). Each time it is with the app,
        its turn is in `being_sent`."""
        headers = {"authorization": f"Bearer {key}", "content-type": "application/json", BATCH_HEADER: batch.id}
        while True:
            try:
                # the text a client's JSON encoder sends, compact and in UTF-8 (escapes could take a
                # body near the size limit past it)
                content = json.dumps(sent_body(batch.endpoint, request.body), ensure_ascii=False,
                                     separators=(",", ":")).encode()
                task, turn = asyncio.current_task(), BatchLineTurn()
                as_batch_line = BATCH_LINE.set(turn)   # (the app runs in this task: httpx's ASGI transport)
                being_sent.turns[task] = turn
                try:
                    reply = await client.post(batch.endpoint, content=content, headers=headers)
                finally:
                    del being_sent.turns[task]
                    BATCH_LINE.reset(as_batch_line)
                if task in being_sent.given_up:   # the app answered though given up: dropped all the same
                    task.uncancel()
                    return None
                body = reply.json()
            except Exception as exc:   # NOTE: the app answers JSON; anything else is a bug to report per request
                return request_result(request.custom_id, None, None, "", {
                    "code": "internal_error", "message": f"{type(exc).__name__}: {exc}"})
            if reply.status_code == 401 and not self.keys().has_tenant(batch.tenant):
                return None
            result = request_result(request.custom_id, reply.status_code, body, reply.headers.get("x-request-id", ""),
                                    None)
            wait_s = retry_wait_s(reply.status_code, reply.headers, body)
            if wait_s is None or self.clock() + wait_s >= batch.expires_at:
                return result
            if batch.id in self._cancelled:   # a refusal to retry (nothing of it ran): dropped as if not sent
                return None
            loop = asyncio.get_running_loop()   # (the wait is real time, whatever `clock` the batch reads)
            send_again_s = loop.time() + wait_s   # the whole wait asked for, looked at every MAX_RETRY_WAIT_S
            while batch.id not in self._cancelled and (left_s := send_again_s - loop.time()) > 0:
                await self._wait_unless_cancelled(batch.id, min(left_s, MAX_RETRY_WAIT_S))
            if batch.id in self._cancelled:   # cancelled while it waited: nothing of it ran, dropped (QA162)
                return None
            if self.is_stopping:   # the gateway stopping while it waited: it goes again at the next start
                return None

    async def _wait_unless_cancelled(self, batch_id: str, wait_s: float) -> None:
        try:   # NOTE: not `wait_for`, which on Python 3.11 may drop a cancel (the gateway stopping)
            async with asyncio.timeout(wait_s):
                await self._wakers[batch_id].wait()
        except TimeoutError:
            pass

