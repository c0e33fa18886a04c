"""Noticing that the workers' fork server died, and starting the next one at once.

The fork server (shards/local_transport.py) may die while its workers serve on: the
kernel's OOM killer picks it (it holds torch), or a stray `kill -9`. Nothing said so, and
the next worker restart first had to start a new server and wait while it imported torch
(12-19 s instead of about 2 s), holding the engine's lock (QA95). A `ForkServerWatch`
waits for the server's end in a thread of its own (blocked in the kernel: nothing runs
until it ends, and nothing on the event loop or under the engine's lock), logs one line
naming it, and starts a new server right away, which imports while no worker waits on it.

Invariants: one line per server lost, however many transports watch it (the first watch
to see it gone reaps it under multiprocessing's own lock, as `ensure_running` would);
nothing is logged or restarted once the watch is closed or `stopped` says so (a start
given up kills an idle server on purpose: shards/local_transport.py
`stop_fork_server_if_idle`).

NOTE: multiprocessing keeps the server's pid, socket and "alive" pipe in its module's
`_forkserver`; this module reads and resets that record as `ensure_running` does.
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from cache.process_state import process_runs
from shards.worker_events import exit_reason, fork_server_down_line

log = logging.getLogger("stepahead.shards")


def current_fork_server_pid() -> int | None:
    """The pid of the fork server this process forks from now (None: none started)."""
    from multiprocessing import forkserver

    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def fork_server_gone(pid: int | None) -> bool:
    """Whether the fork server `pid` (the one a worker was forked from) is gone: replaced
    since, or exited (a zombie not reaped yet has)."""
    if pid is None:
        return False
    return pid != current_fork_server_pid() or not process_runs(pid)


def _how_it_ended(result) -> str:
    """`exit_reason`'s words for a `os.waitid` result."""
    if result.si_code == os.CLD_EXITED:
        return exit_reason(result.si_status)
    return exit_reason(-result.si_status)   # killed (CLD_KILLED, CLD_DUMPED)


def _take_dead_server(pid: int) -> bool:
    """Reap the dead fork server `pid` and clear multiprocessing's record of it, as
    `ensure_running` does for a dead one; whether this call did (False: someone did first,
    or it was replaced or stopped)."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    with server._lock:
        if server._forkserver_pid != pid:
            return False
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == 0:
                return False   # still running after all
        except ChildProcessError:
            pass
        os.close(server._forkserver_alive_fd)
        server._forkserver_address = None
        server._forkserver_alive_fd = None
        server._forkserver_pid = None
    return True


class ForkServerWatch:
    """A thread that waits for the fork server's end, tells the operator and calls
    `restart` (which starts a new server, returning once it is spawned). `stopped()`: the
    owner no longer wants a server (its start was given up)."""

    def __init__(self, restart: Callable[[], None], stopped: Callable[[], bool] = lambda: False) -> None:
        self._restart = restart
        self._stopped = stopped
        self._closed = threading.Event()
        self._started = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Watch from now on (idempotent); nothing where `os.waitid` is missing."""
        with self._started:
            running = self._thread is not None and self._thread.is_alive()
            if running or not hasattr(os, "waitid") or self._closed.is_set():
                return
            self._thread = threading.Thread(target=self._watch, name="fork-server-watch", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop telling and restarting (the thread ends when the server it waits for does)."""
        self._closed.set()

    def _done(self) -> bool:
        return self._closed.is_set() or self._stopped()

    def _watch(self) -> None:
        while not self._done():
            pid = current_fork_server_pid()
            if pid is None:
                return   # none runs (stopped): a later spawn starts one, and the owner's next spawn watches again
            try:   # WNOWAIT: leave it to be reaped under multiprocessing's lock
                how = _how_it_ended(os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT))
            except ChildProcessError:   # reaped already: not this process's to tell
                how = None
            if self._done():
                return
            if how is not None and _take_dead_server(pid):
                log.warning("stepahead: %s", fork_server_down_line(pid, how))
            try:
                self._restart()
            except Exception as exc:   # noqa: BLE001 -- the next spawn tries again, and says why
                log.warning("stepahead: starting a new fork server failed: %s", exc)
                return
            if current_fork_server_pid() == pid:
                return   # not replaced: nothing new to wait for
