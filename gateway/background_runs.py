"""Background responses in flight (`POST /v1/responses` with `background: true`).

A `BackgroundRun` is one such response: the task generating it, its status, and the
server-sent events it has produced so far, one entry per event, so that entry `i`
carries `sequence_number` `i`. Any number of readers (the creating request when it
streams, `GET /v1/responses/{id}?stream=true&starting_after=N`) follow the same log; a
reader that leaves never stops the run.

Invariants:
- a run is found only under the tenant that started it;
- the log only grows, and once `is_done` it never changes again; every reader waiting on
  a run is woken by each new event and by the end;
- a tenant keeps every unfinished run plus at most `keep_finished` finished ones (the
  oldest finished leave first): the stored response outlives its log;
- once the gateway's stop began (`stop_all()`, at the signal, before the connections
  drain) every run is cancelled, those started later too, each after its first step (a
  task cancelled before it starts never runs its `finally`: it would end unstored and
  unfinished), and marked `stopped_by_shutdown` (it ends `failed`, not `cancelled`) unless
  its client's cancel was already under way (it ends `cancelled`, as its client asked);
  `cancel_all()` (at the lifespan's end) leaves no run unfinished.
"""
from __future__ import annotations

import asyncio
from collections import OrderedDict, defaultdict
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

KEEP_FINISHED = 64  # per tenant: finished runs whose events a reader may still replay


@dataclass(slots=True)
class BackgroundRun:
    tenant: str
    response_id: str
    snapshot: Callable[[str], dict]  # the response object with this status and the output so far
    input_items: tuple[dict, ...] = ()  # the request's input, as GET .../input_items lists it
    status: str = "queued"  # then "in_progress"; a finished run's final object is in the response store
    events: list[bytes] = field(default_factory=list)
    is_done: bool = False
    stopped_by_shutdown: bool = False   # the gateway's stop ended it: `failed` (`response.failed`), not `cancelled`
    task: asyncio.Task | None = None
    _more: asyncio.Future | None = None

    def response(self) -> dict:
        return self.snapshot(self.status)

    def append(self, data: bytes) -> None:
        """Add ready-made SSE bytes (one or more `event: ...\\ndata: ...\\n\\n` blocks)."""
        if self.is_done:
            raise RuntimeError(f"background run {self.response_id} already ended")
        self.events.extend(block + b"\n\n" for block in data.split(b"\n\n") if block)
        self._wake()

    def finish(self) -> None:
        self.is_done = True
        self._wake()

    def _wake(self) -> None:
        if self._more is not None and not self._more.done():
            self._more.set_result(None)
        self._more = None

    async def _changed(self) -> None:
        if self._more is None:
            self._more = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._more)  # a reader that leaves must not cancel the others' wait

    async def follow(self, starting_after: int = -1) -> AsyncIterator[bytes]:
        """The events after sequence number `starting_after`, then each new one as it comes,
        until the run ends."""
        index = max(starting_after + 1, 0)
        while True:
            while index < len(self.events):
                yield self.events[index]
                index += 1
            if self.is_done:
                return
            await self._changed()


class BackgroundRuns:
    """The runs of every tenant, by response id."""

    def __init__(self, keep_finished: int = KEEP_FINISHED) -> None:
        self.keep_finished = keep_finished
        self._by_tenant: defaultdict[str, OrderedDict[str, BackgroundRun]] = defaultdict(OrderedDict)
        self.is_stopping = False   # the gateway's stop began: every run is cancelled, any new one at once

    def start(self, run: BackgroundRun, work: Callable[[BackgroundRun], Coroutine[Any, Any, None]]) -> BackgroundRun:
        """Register `run` and start `work(run)`; `work` must call `run.finish()` on every path."""
        runs = self._by_tenant[run.tenant]
        runs[run.response_id] = run
        run.task = asyncio.get_running_loop().create_task(work(run), name=f"background {run.response_id}")
        run.task.add_done_callback(lambda _task: self._forget_old(run.tenant))
        if self.is_stopping:   # a request in flight when the stop began: the run is cancelled where it waits
            run.stopped_by_shutdown = True
            asyncio.get_running_loop().call_soon(_cancel_each, [run.task])   # after its first step
        return run

    def get(self, tenant: str, response_id: str) -> BackgroundRun | None:
        runs = self._by_tenant.get(tenant)
        return runs.get(response_id) if runs is not None else None

    def discard(self, tenant: str, response_id: str) -> None:
        runs = self._by_tenant.get(tenant)
        if runs is not None:
            runs.pop(response_id, None)

    async def cancel(self, run: BackgroundRun) -> None:
        """Stop `run` if it has not ended, and wait until it has."""
        if run.task is not None and not run.task.done():
            run.task.cancel()
            await asyncio.gather(run.task, return_exceptions=True)

    async def forget(self, run: BackgroundRun) -> None:
        """Stop `run` if it has not ended and forget it (its response was deleted): its
        events are no longer kept."""
        await self.cancel(run)
        self.discard(run.tenant, run.response_id)

    def stop_all(self) -> None:
        """Begin cancelling every run, and each one started from here on (the gateway's
        stop began; on the event loop): all in one step of the loop, so a queued run is
        cancelled where it waits, not handed the slot a cancelled one before it freed; a
        run already being cancelled (`POST .../cancel`) is left to end, `cancelled` as its
        client asked. Returns at once: each run the stop ends stores itself `failed` as it
        ends (`cancel_all` waits for them)."""
        self.is_stopping = True
        runs = [run for group in self._by_tenant.values() for run in group.values()
                if not run.is_done and not (run.task is not None and run.task.cancelling())]
        for run in runs:
            run.stopped_by_shutdown = True
        tasks = [run.task for run in runs if run.task is not None and not run.task.done()]
        if tasks:   # NOTE: on the next step: a run started in this one has taken its first step by then
            asyncio.get_running_loop().call_soon(_cancel_each, tasks)

    async def cancel_all(self) -> None:
        """Stop every run (the gateway stops; `stop_all`, if its stop did not already
        begin it) and wait until each has ended."""
        self.stop_all()
        tasks = [run.task for group in self._by_tenant.values() for run in group.values()
                 if run.task is not None and not run.task.done()]
        await asyncio.gather(*tasks, return_exceptions=True)

    def _forget_old(self, tenant: str) -> None:
        runs = self._by_tenant.get(tenant)
        if runs is None:
            return
        finished = [response_id for response_id, run in runs.items() if run.is_done]
        for response_id in finished[:max(0, len(finished) - self.keep_finished)]:
            del runs[response_id]

    def num_running(self, tenant: str | None = None) -> int:
        groups = self._by_tenant.values() if tenant is None else [self._by_tenant.get(tenant, {})]
        return sum(not run.is_done for runs in groups for run in runs.values())


def _cancel_each(tasks: list[asyncio.Task]) -> None:
    """Cancel each task not already being cancelled (a second cancel would cut short the
    storing of its end)."""
    for task in tasks:
        if not task.cancelling():
            task.cancel()
