"""What runs inside a Ray worker actor: the `worker_service.serve` loop in a thread of its
own, fed by an in-actor inbox, its messages long-polled by the engine side (`ray_transport`).

Invariants: messages reach the serve loop in `send`'s numbering whatever order Ray runs
the calls in (a threaded actor may run them out of submission order); the constructor
returns at once (the serve thread imports the worker and loads the model), and this
module imports no torch, so an actor answers `where` as soon as its process runs.
"""
from __future__ import annotations

import os
import threading

from shards.worker_config import WorkerConfig

MAX_POLL_MESSAGES = 512


class ActorBody:
    """Runs inside the actor process."""

    def __init__(self, worker_id: str, config: WorkerConfig) -> None:
        """Returns at once: the serve thread imports the worker and loads the model."""
        import queue

        self._inbox: queue.Queue = queue.Queue()
        self._outbox: queue.Queue = queue.Queue()
        self._next_seq = 0
        self._early: dict[int, object] = {}
        self._order = threading.Lock()

        def receive(timeout_s: float):
            try:
                return self._inbox.get(timeout=timeout_s) if timeout_s > 0 else self._inbox.get_nowait()
            except queue.Empty:
                return None

        self._thread = threading.Thread(target=_serve, args=(worker_id, config, receive, self._outbox.put),
                                        name=f"serve-{worker_id}", daemon=True)
        self._thread.start()

    def send(self, seq: int, message) -> None:
        with self._order:
            self._early[seq] = message
            while self._next_seq in self._early:
                self._inbox.put(self._early.pop(self._next_seq))
                self._next_seq += 1

    def poll(self, wait_s: float) -> list:
        import queue

        messages = []
        try:
            messages.append(self._outbox.get(timeout=wait_s))
            while len(messages) < MAX_POLL_MESSAGES:
                messages.append(self._outbox.get_nowait())
        except queue.Empty:
            pass
        return messages

    def where(self) -> tuple[int, str]:
        """(pid, Ray node id) of this actor."""
        import ray

        return os.getpid(), ray.get_runtime_context().get_node_id()

    def is_serving(self) -> bool:
        return self._thread.is_alive()


def _serve(worker_id: str, config: WorkerConfig, receive, emit) -> None:
    """An actor's serve thread: `worker_service.serve`, imported off the constructor. A worker
    that cannot be imported fails its start as a failed load does (WorkerFailed, then the end)."""
    try:
        from shards.worker_service import serve
    except Exception as exc:
        import traceback

        from shards.protocol import WorkerFailed

        traceback.print_exc()
        emit(WorkerFailed(worker_id, f"{type(exc).__name__}: {exc}"))
        return
    serve(worker_id, config, receive, emit)
