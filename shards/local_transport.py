"""Workers as local processes: forked from a preloaded fork server on CPU, spawned on GPU.

Each worker has its own channels: an inbox `multiprocessing.Queue` (the engine writes
through the queue's feeder thread, so `send` never blocks) and an outbox one-way pipe
read by a thread of this channel. Private channels are the point: a worker killed with
SIGKILL in the middle of a write can only break its own pipe (the reader sees EOF and
reports the exit), never a lock or a stream shared with healthy workers.

NOTE: the engine closes its copy of the pipe's write end right after the start, so the
worker's death is seen as EOF at once, without polling.

NOTE: CPU workers are forked from multiprocessing's fork server, which imports torch,
transformers and the worker code once (`FORK_SERVER_PRELOAD`): a worker then starts in
a fraction of a second instead of re-importing them for seconds, which is what a restart
after a crash waits for, and exits without tearing an interpreter down. The server is a
fresh interpreter (never a fork of the gateway) that only imports, so no thread or CUDA
state is forked. A worker on a GPU is still spawned, so CUDA is initialised only in
a process of its own. A forked worker takes the gateway's environment as it is at the
spawn (`environ`), as a spawned one would, not the server's from when it started.

NOTE: the server may die while its workers serve on (the OOM killer picks it: it holds
torch). A `ForkServerWatch` (shards/fork_server_watch.py) then logs it and starts the next
one at once, and a worker of the dead server that stops later is told as "exited (status
unknown: its fork server was gone)": multiprocessing learns a forked child's status from
its server only, and said 255.

NOTE: the processes started here start with SIGHUP blocked (`shards.hangups_held`): a group's
SIGHUP (a terminal's hang-up) killed the resource tracker, and a fork server still starting.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
from multiprocessing import resource_tracker
from typing import TYPE_CHECKING

from shards.child_call import adopt_environment, call_in_child
from shards.exit_join import not_joined_at_exit
from shards.fork_server_watch import ForkServerWatch, current_fork_server_pid, fork_server_gone
from shards.hangups_held import hangups_held, ignore_group_signals
from shards.safe_imports import no_working_directory_imports
from shards.worker_events import exit_reason

if TYPE_CHECKING:   # NOTE: nothing heavy at import, so the gateway can start the fork server first
    from shards.transport import OnExit, OnMessage
    from shards.worker import WorkerConfig

JOIN_AFTER_EOF_S = 2.0
START_METHODS = ("auto", "forkserver", "spawn")
FORK_SERVER_PRELOAD = ("shards.fork_server_signals", "__main__", "shards.worker_service", "shards.model_loader",
                       "shards.model_runner", "shards.kv_transfer", "shards.tiny_model", "cache.policies")


def fork_server_context():
    """multiprocessing's fork server context, set to preload `FORK_SERVER_PRELOAD`."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(FORK_SERVER_PRELOAD))
    return ctx


def forks_from_server(device: str, start_method: str = "auto") -> bool:
    """Whether a worker on `device` started with `start_method` is forked from the server
    ("auto": on the CPU) rather than spawned."""
    return start_method == "forkserver" or (start_method == "auto" and device == "cpu")


def start_fork_server() -> None:
    """Start the fork server now, if it is not running (and the resource tracker before
    it), with SIGHUP held: it imports in a process of its own while the caller goes on
    (the gateway loads its own modules meanwhile)."""
    from multiprocessing import forkserver

    fork_server_context()
    with no_working_directory_imports(), hangups_held():
        forkserver.ensure_running()


def stop_fork_server_if_idle() -> bool:
    """Kill the fork server when nothing was forked from it (or started otherwise) by this
    process yet; whether it was killed. A start given up while the server still imports
    torch need not wait for it: a fork asked of it meanwhile fails at once. Once it has
    forked, it is left alone: multiprocessing tracks those children through it.

    NOTE: a fork the server makes in the very moment it is killed outlives it; such a
    child finds this process gone and exits (a worker once loaded, the conversion once
    done, which it then leaves complete)."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)   # multiprocessing's own record
    if not pid or mp.active_children():
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def _process_main(worker_id: str, config: WorkerConfig, inbox, outbox, environ: dict[str, str]) -> None:
    """The worker process: serve until Shutdown, or until the engine process is gone.

    NOTE: Ctrl+C in a terminal sends SIGINT to the whole process group, workers included.
    A worker ignores it: the engine process is the one that shuts down, gracefully, and
    sends Shutdown once the requests in flight have ended (else every worker died at once
    with a KeyboardInterrupt traceback, failing those requests). A group's SIGTERM and
    SIGHUP likewise (a forked worker has them ignored already: shards/fork_server_signals.py;
    a spawned one sets them here, then unblocks SIGHUP: it started held, `hangups_held`)."""
    ignore_group_signals()
    adopt_environment(environ)
    from shards.worker_service import serve

    gateway = mp.parent_process()  # NOTE: the engine's process, also when forked by the server

    def receive(timeout_s: float):
        try:
            return inbox.get(timeout=timeout_s) if timeout_s > 0 else inbox.get_nowait()
        except queue.Empty:
            if not gateway.is_alive():
                from shards.protocol import Shutdown

                return Shutdown()
            return None

    try:
        serve(worker_id, config, receive, outbox.send)
    except (BrokenPipeError, EOFError, OSError):
        pass  # the engine went away
    finally:
        outbox.close()


class LocalChannel:
    def __init__(self, ctx, worker_id: str, incarnation: int, config: WorkerConfig,
                 on_message: OnMessage, on_exit: OnExit) -> None:
        self.worker_id = worker_id
        self.incarnation = incarnation
        self._on_message = on_message
        self._on_exit = on_exit
        self._inbox = ctx.Queue()
        self._inbox.cancel_join_thread()  # NOTE: never block engine exit on a dead worker
        reader, writer = ctx.Pipe(duplex=False)
        self._reader = reader
        self._process = ctx.Process(target=_process_main,
                                    args=(worker_id, config, self._inbox, writer, dict(os.environ)),
                                    name=f"stepahead-{worker_id}.{incarnation}", daemon=True)
        with no_working_directory_imports(), hangups_held():   # a fork server that died is started again here
            self._process.start()
        forked = ctx.get_start_method() == "forkserver"
        self._fork_server_pid = current_fork_server_pid() if forked else None   # the one it came from
        writer.close()
        self._ended = threading.Event()   # the worker's end of the outbox closed: the process is gone
        self._thread = threading.Thread(target=self._read, name=f"reader-{worker_id}.{incarnation}",
                                        daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while True:
                try:
                    message = self._reader.recv()
                except (EOFError, OSError):
                    break
                self._on_message(self.worker_id, self.incarnation, message)
        finally:
            self._ended.set()
            self._process.join(JOIN_AFTER_EOF_S)
            if self._process.exitcode is None:   # its fork server did not tell (stopped): not waited for at exit
                not_joined_at_exit(self._process)
            self._reader.close()
            self._close_inbox()
            self._on_exit(self.worker_id, self.incarnation,
                          exit_reason(self._process.exitcode, fork_server_gone=fork_server_gone(self._fork_server_pid)))

    def _close_inbox(self) -> None:
        """Close the inbox and let go of it (idempotent). NOTE: a Queue holds three
        named semaphores, unlinked only when it is collected or at a normal interpreter
        exit; a gateway stopped by SIGTERM, or a worker restarted many times, would leave
        them to the resource tracker ("leaked semaphore objects") otherwise."""
        inbox, self._inbox = self._inbox, None
        if inbox is not None:
            inbox.close()

    def send(self, message) -> None:
        inbox = self._inbox
        if inbox is None:
            return  # the worker is gone
        try:
            inbox.put(message)
        except (ValueError, OSError):
            pass  # the inbox is closed: the worker is gone

    def is_alive(self) -> bool:
        """Whether the worker process runs: its end of the outbox, which it holds until it
        exits, is open. NOTE: not `Process.is_alive()`, which for a worker forked from the
        fork server asks the server: once the server is gone (killed), it says that every
        worker it forked exited (status 255) while they serve on. Hot path (the router's):
        no system call; the server's death is watched elsewhere (`ForkServerWatch`)."""
        return not self._ended.is_set()

    def pid(self) -> int | None:
        return self._process.pid

    def kill(self) -> None:
        """SIGKILL the worker while it runs (NOTE: not `Process.kill()`, a no-op once the
        fork server it came from is gone: see `is_alive`)."""
        if self.is_alive() and self._process.pid is not None:
            try:
                os.kill(self._process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self, timeout_s: float) -> None:
        """Shut down gracefully (the caller sent Shutdown); kill past `timeout_s`. Invariant:
        once it returns, this process's exit never waits on the worker (`not_joined_at_exit`
        where its status has not come: the fork server may be stopped)."""
        if not self._ended.wait(timeout_s):
            self.kill()
            self._ended.wait(1.0)
        self._thread.join(timeout_s)
        self._close_inbox()
        if self._process.exitcode is None:
            not_joined_at_exit(self._process)


class LocalTransport:
    """`start_method`: "auto" (forked from the fork server on the CPU, spawned on a GPU),
    or "forkserver" / "spawn" for every worker."""
    name = "local"
    can_share_memory = True

    def __init__(self, start_method: str = "auto") -> None:
        if start_method not in START_METHODS:
            raise ValueError(f"start_method must be one of {', '.join(START_METHODS)}, not {start_method!r}")
        self._start_method = start_method
        self._spawn_context = mp.get_context("spawn")
        self._fork_server_context = fork_server_context()
        self._start_cancelled = threading.Event()
        self._fork_server_watch = ForkServerWatch(start_fork_server, stopped=self._start_cancelled.is_set)
        with hangups_held():   # the resource tracker: a Queue or a spawn would start it with SIGHUP's default
            resource_tracker.ensure_running()

    def start_method(self, config: WorkerConfig) -> str:
        """How a worker with `config` starts: "forkserver" or "spawn"."""
        return "forkserver" if forks_from_server(config.device, self._start_method) else "spawn"

    def spawn(self, worker_id: str, incarnation: int, config: WorkerConfig,
              on_message: OnMessage, on_exit: OnExit) -> LocalChannel:
        """Returns once the process is started: a fork waits for the fork server (seconds
        while a new one imports torch), so the engine calls it outside its lock."""
        channel = LocalChannel(self._context(config.device), worker_id, incarnation, config, on_message, on_exit)
        if forks_from_server(config.device, self._start_method):
            self._fork_server_watch.start()   # its workers now depend on it for every restart
        return channel

    def _context(self, device: str):
        """The multiprocessing context a process for `device` starts from."""
        return self._fork_server_context if forks_from_server(device, self._start_method) else self._spawn_context

    def call_in_child(self, device: str, module: str, function: str, args: tuple):
        """`module.function(*args)` in a child process started as the workers on `device`
        are (forked from the fork server, which has torch imported already, or spawned),
        with this process's environment; what it returns or raises comes back here. This
        process imports neither `module` nor what it imports. Raises StartCancelled (the
        child killed) once `cancel_start` is called."""
        if forks_from_server(device, self._start_method) and not self._start_cancelled.is_set():
            start_fork_server()   # held, where this is the first fork (`uvicorn --factory`)
        return call_in_child(self._context(device), module, function, args, self._start_cancelled)

    def cancel_start(self) -> None:
        """Stop what a start runs in a child now (`prepare_model`), and any later call."""
        self._start_cancelled.set()

    def prepare_model(self, model: str, device: str, dtype: str) -> str:
        """`shards.model_loader.prepare_model` (convert the embedded GGUF once, settle
        "auto") in a child process, so that the engine's own process does not import torch
        for it, and a Ctrl+C can stop a first conversion at once (`cancel_start`): forked
        from the fork server where the workers fork from it, else spawned. Right here
        instead when this process has torch imported already (a GPU's presence was
        checked with it): a spawned child would import it again.

        NOTE: measured (SmolLM2, spawned CPU workers): start to ready 22.3 s with torch
        imported here, 18.3 s with a spawned child, whose import runs beside this
        process's own start instead of under its GIL."""
        if not forks_from_server(device, self._start_method) and "torch" in sys.modules:
            from shards.model_loader import prepare_model

            return prepare_model(model, device, dtype)
        from shards.model_files import ModelLoadError, remove_abandoned_conversions
        from shards.transport import StartCancelled

        try:
            return self.call_in_child(device, "shards.model_loader", "prepare_model", (model, device, dtype))
        except ChildProcessError as exc:
            raise ModelLoadError(f"preparing model {model!r} failed: {exc}") from exc
        except StartCancelled:
            remove_abandoned_conversions()   # the child is gone: what it was writing goes too
            raise

    def close(self) -> None:
        self._fork_server_watch.close()
