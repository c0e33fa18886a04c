"""What a `LocalEngine` does with each message from a worker, and with a worker's exit,
and how it performs the dispatcher's decisions (`_perform`: messages to workers, events
to the request streams).

`EngineMessages` is a part of `shards.engine.LocalEngine` (a base class), kept apart so
that each file holds one concept. Both handlers run on a transport's reader thread and
take the engine's `_lock`; they use its `_supervisor`, `_dispatcher`, `_channels`,
`_streams`, `_ready`, `_placements`, `_probed_costs` and `_stats`.

Invariants: a fenced incarnation's messages are ignored (`Supervisor.is_current`); a
worker is routable only once its `WorkerReady` is accepted, and not after its exit, which
fences it at once; its requests go on at the supervise tick once its exit `settled` (so
workers killed together are all seen gone first; during the start, at once); the
shared-memory segments a decision leaves unused are unlinked, and the operator told of a
worker lost or back after the start (shards/worker_events.py), after the lock is released.
"""
from __future__ import annotations

import asyncio
import logging
import time

from shards.dispatcher import Outbound
from shards.protocol import EngineEvent, ErrorEvent, EventBatch, Pong, WorkerFailed, WorkerReady, WorkerStats
from shards.supervisor import START_FAILED_REASON
from shards.worker_events import fence_words, worker_back_line, worker_down_line

log = logging.getLogger("stepahead.shards")


class EngineMessages:
    """The worker -> engine side of a `LocalEngine`."""

    def _perform(self, out: Outbound) -> None:
        """Send and deliver (under the lock, so per-worker and per-request order hold)."""
        for worker_id, message in out.sends:
            channel = self._channels.get(worker_id)
            if channel is not None:
                channel.send(message)
        self._deliver(out.deliveries)

    def _deliver(self, events: list[EngineEvent]) -> None:
        """Hand each event to its request's stream, in order: one wake-up per event loop
        for all of them (a decode pass's events come together)."""
        by_loop: dict[asyncio.AbstractEventLoop, list] = {}
        for event in events:
            target = self._streams.get(event.request_id)
            if target is not None:
                by_loop.setdefault(target[0], []).append((target[1], event))
        for loop, streamed in by_loop.items():
            loop.call_soon_threadsafe(_put_each, streamed)

    def _on_message(self, worker_id: str, incarnation: int, message) -> None:
        now = time.monotonic()
        line = None
        with self._lock:
            supervisor = self._supervisor
            out = Outbound()
            if isinstance(message, WorkerReady):
                if supervisor.on_ready(worker_id, incarnation, now):
                    down_s = self._down_since.pop(worker_id, None)
                    if down_s is not None:
                        line = worker_back_line(worker_id, supervisor.health(worker_id).num_restarts, now - down_s)
                    self.max_context_tokens = message.max_context_tokens
                    self._placements[worker_id] = (message.device, message.dtype)
                    self.model_id = message.model_id
                    if message.costs is not None:
                        self._probed_costs[worker_id] = message.costs
                    out = self._dispatcher.add_worker(worker_id, self._probed_costs.get(worker_id), now)
                    self._ready.notify_all()
            elif isinstance(message, WorkerFailed):
                if self._supervise_task is None:   # the start fails with it
                    self._start_error = f"worker {worker_id} failed to start: {message.message}"
                if not self._stopping:   # stopping, nothing restarts (QA123: "restarting it in" logged)
                    out, line = self._on_start_failed(worker_id, incarnation, message.message, now)
                self._ready.notify_all()
            elif supervisor.is_current(worker_id, incarnation):
                supervisor.on_heard(worker_id, incarnation, now,
                                    message.sent_s if isinstance(message, Pong) else None)
                if isinstance(message, Pong):
                    self._dispatcher.set_round_trip(worker_id, supervisor.health(worker_id).round_trip_s)
                elif isinstance(message, WorkerStats):
                    self._stats[worker_id] = message
                elif isinstance(message, EventBatch):   # one decode pass's messages, in order
                    for each in message.messages:
                        out.extend(self._dispatcher.on_worker_message(worker_id, each, now))
                else:
                    out = self._dispatcher.on_worker_message(worker_id, message, now)
            self._perform(out)
        unlink_segments(out.unlink)
        if line is not None:   # the hot path (every token's message) makes no call for nothing
            self._tell_operator(line)

    def _on_exit(self, worker_id: str, incarnation: int, reason: str = "exited") -> None:
        line = None
        with self._lock:
            if self._stopping:
                return
            now = time.monotonic()
            out = Outbound()
            if self._supervisor.on_exit(worker_id, incarnation, now, reason):
                if self._supervise_task is None or worker_id not in self._dispatcher.ready_workers():
                    out, line = self._remove_fenced(worker_id, reason, now)   # no tick takes it out
                self._ready.notify_all()
            self._perform(out)
        unlink_segments(out.unlink)
        self._tell_operator(line)

    def _on_start_failed(self, worker_id: str, incarnation: int, error: str, now: float
                         ) -> tuple[Outbound, str | None]:
        """A worker could not load (caller holds the lock): fenced at once with its error as
        the reason (its exit, which follows, is then stale), the operator told the whole
        error once per distinct one (a restart loop's later failures in a short line), and,
        once every worker fails so, the requests refused rather than left waiting."""
        supervisor = self._supervisor
        previous = supervisor.health(worker_id).start_error
        if not supervisor.on_start_failed(worker_id, incarnation, now, error):
            return Outbound(), None
        health = supervisor.health(worker_id)
        words = (f"failed to start again (the same error; {health.num_failed_starts} failed starts)"
                 if error == previous else f"{START_FAILED_REASON}: {error.rstrip().rstrip('.')}")
        out, line = self._remove_fenced(worker_id, words, now, while_starting=False)   # refusing, if all fail so
        if supervisor.cannot_start() is not None and line is not None and error != previous:
            line += "; until a worker starts, the model's requests are refused"
        return out, line

    def _take_out_fenced(self, fenced_now: set[str], now: float) -> tuple[Outbound, list[str]]:
        """Take out of the dispatcher (caller holds the lock) the workers fenced in this tick
        (`fenced_now`) and those whose exit `settled`, and kill each: what to send and deliver,
        and the operator's lines."""
        out, lines = Outbound(), []
        supervisor = self._supervisor
        settled = {worker_id for worker_id in self._dispatcher.ready_workers() if supervisor.settled(worker_id, now)}
        for worker_id in sorted(fenced_now | settled):
            words = fence_words(supervisor.health(worker_id).fence_reason, supervisor.config.health_timeout_s)
            removed, line = self._remove_fenced(worker_id, words, now)
            out.extend(removed)
            lines.append(line)
            self._channels[worker_id].kill()
        return out, lines

    def _remove_fenced(self, worker_id: str, reason: str, now: float, *,
                       while_starting: bool | None = None) -> tuple[Outbound, str | None]:
        """Take a worker the supervisor just fenced out of the dispatcher (caller holds
        the lock): what to send and deliver, and the operator's line about it (None
        during the start, which fails with its own error). `while_starting`: whether the
        line adds "while starting" (None: when the slot has failed starts)."""
        num_retried, num_resumed = self._dispatcher.stats.num_retried, self._dispatcher.stats.num_resumed
        out = self._dispatcher.remove_worker(worker_id, now)
        if self._supervise_task is None:
            return out, None
        self._down_since.setdefault(worker_id, now)   # a failed restart keeps the first stop
        num_failed = sum(1 for event in out.deliveries
                         if isinstance(event, ErrorEvent) and event.code == "worker_died")
        line = worker_down_line(worker_id, reason, num_failed=num_failed,
                                num_retried=self._dispatcher.stats.num_retried - num_retried,
                                num_resumed=self._dispatcher.stats.num_resumed - num_resumed,
                                restart_in_s=self._supervisor.restart_delay_s(worker_id),
                                num_serving=len(self._dispatcher.router.usable(self._dispatcher.ready_workers(), now)),
                                while_starting=(self._supervisor.health(worker_id).num_failed_starts > 0
                                                if while_starting is None else while_starting))
        out.extend(self._refusing_as_the_slots_stand(now))
        return out, line

    def _refusing_as_the_slots_stand(self, now: float) -> Outbound:
        """The dispatcher refuses requests while every slot's last start failed to load
        (`Supervisor.cannot_start`), retry after the first restart due; it stops once one
        has not (a restart that crashed rather than failed to load is waited for: QA114)."""
        supervisor = self._supervisor
        return self._dispatcher.set_cannot_start(supervisor.cannot_start(), supervisor.next_restart_s() or now, now)

    def _tell_operator(self, line: str | None) -> None:
        """Hand a worker event's line to `on_worker_event` (the gateway prints it with
        its model's name), else to the log."""
        if line is None:
            return
        if self.on_worker_event is not None:
            self.on_worker_event(line)
        else:
            log.warning("stepahead: model %r: %s", self.model_id, line)


def unlink_segments(names: list[str]) -> None:
    """Remove shared-memory segments that no worker will import (best effort)."""
    if not names:
        return
    from multiprocessing import shared_memory

    for name in names:
        try:
            segment = shared_memory.SharedMemory(name=name)
        except FileNotFoundError:
            continue
        segment.close()
        segment.unlink()


def _put_each(streamed: list) -> None:
    """On a stream's event loop: each (stream, event) in order."""
    for stream, event in streamed:
        stream.put_nowait(event)
