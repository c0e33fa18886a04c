"""LocalEngine: one model served by N local worker processes, as the gateway sees it.

`generate(item)` is an async generator of EngineEvents. Invariants: every request ends
with exactly one terminal event (FinishEvent or ErrorEvent) — if its worker dies, the
engine synthesizes an ErrorEvent, so no caller waits forever; closing the generator
early (client gone) sends a cancel to the worker, which releases the request's blocks.
"""
from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import threading
import time
from dataclasses import dataclass, field
from typing import AsyncIterator

from shards.chat_template import supports_tools
from shards.protocol import (CancelRequest, EngineEvent, ErrorEvent, FinishEvent, Shutdown,
                             StatsRequest, TokenEvent, WorkerFailed, WorkerReady, WorkerStats,
                             WorkItem)
from shards.worker import WorkerConfig, worker_main

WORKER_START_TIMEOUT_S = 300.0
WATCHDOG_INTERVAL_S = 0.5


class EngineStartError(RuntimeError):
    pass


@dataclass(slots=True)
class WorkerHandle:
    worker_id: str
    process: mp.Process
    inbox: object
    in_flight: dict[str, bool] = field(default_factory=dict)  # request id -> token sent yet
    ready: bool = False
    stats: WorkerStats | None = None


class LocalEngine:
    def __init__(self, model: str = "smollm2", num_workers: int = 2, *, num_hot_blocks: int = 4096,
                 num_host_blocks: int = 0, block_size: int = 16, policy: str = "lru",
                 max_running: int = 8, threads_per_worker: int | None = None):
        threads = threads_per_worker or max(1, (os.cpu_count() or 2) // max(1, num_workers))
        self.config = WorkerConfig(model=model, num_hot_blocks=num_hot_blocks,
                                   num_host_blocks=num_host_blocks, block_size=block_size,
                                   policy=policy, max_running=max_running, num_threads=threads)
        self.num_workers = num_workers
        self.model_id = model
        self.tokenizer = None
        self.max_context_tokens = 0
        self.supports_tools = False
        self._ctx = mp.get_context("spawn")
        self._outbox = None
        self._workers: dict[str, WorkerHandle] = {}
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._watchdog: asyncio.Task | None = None
        self._ready = threading.Condition(self._lock)
        self._stopping = False
        self._start_error: str | None = None

    # --- lifecycle -------------------------------------------------------------
    async def start(self) -> None:
        from shards.model_loader import load_model_files, load_tokenizer

        await asyncio.to_thread(load_model_files, self.config.model)  # convert once, before forking
        self._outbox = self._ctx.Queue()
        self._reader = threading.Thread(target=self._read_outbox, name="engine-reader", daemon=True)
        self._reader.start()
        for i in range(self.num_workers):
            self._spawn(f"w{i}")
        self.tokenizer = await asyncio.to_thread(load_tokenizer, self.config.model)
        self.supports_tools = supports_tools(self.tokenizer)
        await asyncio.to_thread(self._wait_ready)
        self._watchdog = asyncio.create_task(self._watch_workers())

    def _spawn(self, worker_id: str) -> None:
        inbox = self._ctx.Queue()
        process = self._ctx.Process(target=worker_main, args=(worker_id, self.config, inbox, self._outbox),
                                    name=f"stepahead-{worker_id}", daemon=True)
        process.start()
        self._workers[worker_id] = WorkerHandle(worker_id, process, inbox)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + WORKER_START_TIMEOUT_S
        with self._ready:
            while not all(w.ready for w in self._workers.values()):
                failed = [w for w in self._workers.values() if not w.process.is_alive()]
                if failed or self._start_error:
                    raise EngineStartError(self._start_error or f"worker {failed[0].worker_id} exited at start")
                if time.monotonic() > deadline:
                    raise EngineStartError("workers did not become ready in time")
                self._ready.wait(0.2)

    async def stop(self) -> None:
        self._stopping = True
        if self._watchdog:
            self._watchdog.cancel()
        for worker in self._workers.values():
            try:
                worker.inbox.put(Shutdown())
            except (OSError, ValueError):
                pass
        for worker in self._workers.values():
            await asyncio.to_thread(worker.process.join, 5)
            if worker.process.is_alive():
                worker.process.kill()
        if self._outbox is not None:
            self._outbox.put(None)

    # --- outbox -> per-request queues ------------------------------------------------
    def _read_outbox(self) -> None:
        while True:
            message = self._outbox.get()
            if message is None:
                return
            if isinstance(message, WorkerReady):
                with self._ready:
                    self._workers[message.worker_id].ready = True
                    self.max_context_tokens = message.max_context_tokens
                    self.model_id = message.model_id
                    self._ready.notify_all()
            elif isinstance(message, WorkerFailed):
                with self._ready:
                    self._start_error = f"worker {message.worker_id} failed to start: {message.message}"
                    self._ready.notify_all()
            elif isinstance(message, WorkerStats):
                self._workers[message.worker_id].stats = message
            else:
                self._deliver(message)

    def _deliver(self, event: EngineEvent) -> None:
        with self._lock:
            target = self._streams.get(event.request_id)
            if isinstance(event, TokenEvent):
                for worker in self._workers.values():
                    if event.request_id in worker.in_flight:
                        worker.in_flight[event.request_id] = True
        if target is not None:
            loop, stream = target
            loop.call_soon_threadsafe(stream.put_nowait, event)

    async def _watch_workers(self) -> None:
        """Fail the in-flight requests of a worker whose process died."""
        while not self._stopping:
            await asyncio.sleep(WATCHDOG_INTERVAL_S)
            for worker in self._workers.values():
                if worker.process.is_alive() or not worker.in_flight:
                    continue
                with self._lock:
                    lost = dict(worker.in_flight)
                    worker.in_flight.clear()
                for request_id, token_sent in lost.items():
                    self._deliver(ErrorEvent(request_id, f"worker {worker.worker_id} died",
                                             "worker_died", retryable=not token_sent))

    # --- requests --------------------------------------------------------------
    def _pick_worker(self, item: WorkItem) -> WorkerHandle:
        alive = [w for w in self._workers.values() if w.ready and w.process.is_alive()]
        if not alive:
            raise EngineStartError("no live worker")
        return min(alive, key=lambda w: (len(w.in_flight), w.worker_id))

    async def generate(self, item: WorkItem) -> AsyncIterator[EngineEvent]:
        stream: asyncio.Queue = asyncio.Queue()
        item.enqueued_at_s = time.time()
        with self._lock:
            worker = self._pick_worker(item)
            self._streams[item.request_id] = (asyncio.get_running_loop(), stream)
            worker.in_flight[item.request_id] = False
        finished = False
        try:
            worker.inbox.put(item)
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
                worker.in_flight.pop(item.request_id, None)
            if not finished and worker.process.is_alive():
                worker.inbox.put(CancelRequest(item.request_id))

    # --- observability -----------------------------------------------------------
    def health(self) -> dict:
        return {"workers": {w.worker_id: {"alive": w.process.is_alive(), "ready": w.ready,
                                          "in_flight": len(w.in_flight)}
                            for w in self._workers.values()}}

    async def refresh_stats(self, timeout_s: float = 1.0) -> None:
        for worker in self._workers.values():
            if worker.process.is_alive():
                worker.inbox.put(StatsRequest())
        await asyncio.sleep(min(timeout_s, 0.2))

    def metrics(self) -> list[dict]:
        rows = []
        for worker in self._workers.values():
            stats = worker.stats
            rows.append({"worker": worker.worker_id, **(stats.stats if stats else {}),
                         "num_running": stats.num_running if stats else 0,
                         "num_waiting": stats.num_waiting if stats else 0})
        return rows
