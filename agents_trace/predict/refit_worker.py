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
`shutdown_timeout_s`. The job running is stopped too, not waited for: each job runs
under the worker's `FitStop` (fit_stop.py), so its EM gives up after the iteration in
progress (milliseconds) with `FitStopped`, its result dropped, and `close` returns once
it has ended, within `timeout_s` whatever happens.

`prepare`, when given, runs once in the worker's thread before its first job (a failure is
logged and the jobs still run): the gateway imports hmmlearn there, under its lock of
library imports, instead of on its start (agents_trace/predict/hmm.py).

A process exit never aborts because of a refit (QA192 F1: a daemon thread still inside
hmmlearn's C++ when the interpreter finalizes aborts the process, exit status 134): while
the thread lives, an `atexit` hook (run after the main thread is done, before daemon
threads are ended) requests the stop and waits, at most `EXIT_WAIT_S`, until no fit is in
native EM, after which none enters it again. It covers a process that never calls
`close` and a `close` whose `timeout_s` passed; the thread (a daemon) may then still run
Python code, which the interpreter ends safely.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque
from typing import Callable

from .fit_stop import FitStop, FitStopped, stoppable_by

_log = logging.getLogger("stepahead.agents_trace")

EXIT_WAIT_S = 10.0   # at exit, the longest wait for a fit to leave native EM (one iteration: ms)


class RefitWorker:
    def __init__(self, name: str = "stepahead-refit", cpu_share: float = 1.0,
                 prepare: Callable[[], object] | None = None) -> None:
        if not 0.0 < cpu_share <= 1.0:
            raise ValueError(f"cpu_share must be in (0, 1], not {cpu_share!r}")
        self._name = name
        self._prepare = prepare
        self.cpu_share = cpu_share
        self._not_before_s = 0.0   # time.monotonic() before which no job starts
        self._cond = threading.Condition()
        self._queue: deque[tuple[str, Callable[[], object]]] = deque()
        self._pending: set[str] = set()
        self._running_key: str | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._stop = FitStop()
        self._pid: int | None = None   # the process whose exit the atexit hook guards
        self.num_done = 0
        self.num_failed = 0
        self.num_stopped = 0   # jobs the stop cut short (FitStopped), their results dropped
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
                self._pid = os.getpid()
                atexit.register(self._stop_at_exit)
                self._thread.start()
            self._cond.notify_all()
            return True

    def _run(self) -> None:
        if self._prepare is not None:
            try:
                self._prepare()
            except Exception:
                _log.exception("background refits: preparing them failed")
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
            failed = stopped = False
            try:
                with stoppable_by(self._stop):
                    job()
            except FitStopped:
                stopped = True
            except Exception:
                _log.exception("background refit %s failed", key)
                failed = True
            used_cpu_s = time.thread_time() - started_cpu_s
            with self._cond:
                self._not_before_s = time.monotonic() + used_cpu_s * (1.0 / self.cpu_share - 1.0)
                self._running_key = None
                self.num_done += 1
                self.num_failed += int(failed)
                self.num_stopped += int(stopped)
                self._cond.notify_all()

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Block until nothing is queued or running; False on timeout."""
        with self._cond:
            return self._cond.wait_for(
                lambda: not self._queue and self._running_key is None, timeout_s)

    def close(self, timeout_s: float | None = 1.0) -> None:
        """Drop the queued jobs, stop the job running (if any, see the module) and the
        thread, and wait at most `timeout_s` for them to end; returns within `timeout_s`
        whatever the jobs take."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        thread = self._shut()
        if thread is None:
            return
        self._stop.wait_native_idle(timeout_s)
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if not thread.is_alive():
            atexit.unregister(self._stop_at_exit)

    def _shut(self) -> threading.Thread | None:
        """Close the queue and request the stop; the thread, if one started."""
        with self._cond:
            self._closed = True
            self.num_dropped += len(self._queue)
            self._queue.clear()
            self._pending.clear()
            self._cond.notify_all()
            thread = self._thread
        self._stop.request()
        return thread

    def _stop_at_exit(self) -> None:
        """The atexit hook: no fit of this worker in hmmlearn's native code once the
        interpreter ends the daemon thread (see the module)."""
        if os.getpid() != self._pid:   # a forked child: it has no refit thread, and its copy of the gate may be held
            return
        self._shut()
        if not self._stop.wait_native_idle(EXIT_WAIT_S):
            _log.warning("a background refit was still fitting %.0f s after the exit asked it to stop",
                         EXIT_WAIT_S)
