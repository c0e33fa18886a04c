"""A background thread that runs model refits, so the request path never waits for one.

`request(key, job)` is O(1) and never blocks on a fit: it queues `job` unless a job with
the same key is already queued (a tenant that finishes many sessions during one fit gets
one more refit, not many). Jobs run one at a time in FIFO order; a failing job is logged
and does not stop the thread. The thread starts on the first request.

CPU is paced: after a job that used c seconds of CPU, the next one starts no sooner than
c x (1 / cpu_share - 1) seconds later, so refits take at most `cpu_share` of one core
however fast sessions finish (a tenant finishing sessions at a high rate would otherwise
keep a core busy refitting; a later refit learns from more sessions, nothing is lost).
`close` drops the jobs that have not started, and no job starts after it: the gateway
saves the models before it closes the worker (`stop_forecasting`), so their results
would be saved by no one, and running them made a stop last up to 10 s beyond its
`shutdown_timeout_s`. It waits at most `timeout_s` for a job already running; one that
runs longer ends on its own (the thread is a daemon), its result unsaved.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Callable

_log = logging.getLogger(__name__)


class RefitWorker:
    def __init__(self, name: str = "stepahead-refit", cpu_share: float = 1.0) -> None:
        if not 0.0 < cpu_share <= 1.0:
            raise ValueError(f"cpu_share must be in (0, 1], not {cpu_share!r}")
        self._name = name
        self.cpu_share = cpu_share
        self._not_before_s = 0.0   # time.monotonic() before which no job starts
        self._cond = threading.Condition()
        self._queue: deque[tuple[str, Callable[[], object]]] = deque()
        self._pending: set[str] = set()
        self._running_key: str | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self.num_done = 0
        self.num_failed = 0
        self.num_dropped = 0   # queued jobs `close` dropped unrun

    def request(self, key: str, job: Callable[[], object]) -> bool:
        """Queue `job` under `key`; False when one with that key is already queued or
        the worker is closed."""
        with self._cond:
            if self._closed or key in self._pending:
                return False
            self._pending.add(key)
            self._queue.append((key, job))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name,
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    pause_s = self._not_before_s - time.monotonic()
                    if self._queue and pause_s <= 0:
                        break
                    self._cond.wait(pause_s if self._queue else None)
                key, job = self._queue.popleft()
                self._pending.discard(key)
                self._running_key = key
            started_cpu_s = time.thread_time()
            try:
                job()
                failed = False
            except Exception:
                _log.exception("background refit %s failed", key)
                failed = True
            used_cpu_s = time.thread_time() - started_cpu_s
            with self._cond:
                self._not_before_s = time.monotonic() + used_cpu_s * (1.0 / self.cpu_share - 1.0)
                self._running_key = None
                self.num_done += 1
                self.num_failed += int(failed)
                self._cond.notify_all()

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Block until nothing is queued or running; False on timeout."""
        with self._cond:
            return self._cond.wait_for(
                lambda: not self._queue and self._running_key is None, timeout_s)

    def close(self, timeout_s: float | None = 1.0) -> None:
        """Drop the queued jobs, stop the thread, and wait at most `timeout_s` for the job
        running (if any) to end; returns within `timeout_s` whatever the jobs take."""
        with self._cond:
            self._closed = True
            self.num_dropped += len(self._queue)
            self._queue.clear()
            self._pending.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
