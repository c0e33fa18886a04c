"""How the engine reaches its workers: local processes (default) or Ray actors.

The engine code is the same for both. A `Transport` spawns one `WorkerChannel` per
worker incarnation; the channel carries engine -> worker messages (`send`, in order)
and calls `on_message(worker_id, incarnation, message)` for every worker -> engine
message, from a thread it owns, in the order the worker emitted them. When the worker
is gone (exited, killed, actor died) the channel calls `on_exit(worker_id, incarnation,
reason)` exactly once, after its last `on_message`; `reason` says how it ended, in words
("killed by SIGKILL", "exited with status 1").

Invariants: `send` never blocks on a slow or dead worker (a dead channel drops
messages); `kill` is immediate (SIGKILL / ray.kill) and is how a worker is fenced.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from shards.worker_config import WorkerConfig

OnMessage = Callable[[str, int, object], None]
OnExit = Callable[[str, int, str], None]

TRANSPORTS = ("local", "ray")


class StartCancelled(Exception):
    """The start was stopped (Ctrl+C) before it finished; what it had started is gone."""


class WorkerChannel(Protocol):
    worker_id: str
    incarnation: int

    def send(self, message) -> None: ...

    def is_alive(self) -> bool: ...

    def pid(self) -> int | None: ...

    def kill(self) -> None: ...

    def stop(self, timeout_s: float) -> None: ...


class Transport(Protocol):
    name: str
    can_share_memory: bool  # workers share a machine: shared-memory prefix transfer works

    def spawn(self, worker_id: str, incarnation: int, config: WorkerConfig,
              on_message: OnMessage, on_exit: OnExit) -> WorkerChannel: ...

    def prepare_model(self, model: str, device: str | None, dtype: str) -> str:
        """Make `model` ready for workers (see `shards.model_loader.prepare_model`);
        the dtype they load in."""

    def cancel_start(self) -> None:
        """From any thread: stop what `prepare_model` (or `connect`) runs now, if it can be
        stopped."""

    # A transport that must first join something (Ray: `RayTransport.connect`) also has
    # `connect()`, which the engine's start calls, from a worker thread, before any spawn.

    def close(self) -> None: ...


def make_transport(name: str, options: dict | None = None) -> Transport:
    """The transport named in the config ("local" or "ray"); `options` go to it."""
    options = dict(options or {})
    if name == "local":
        from shards.local_transport import LocalTransport

        return LocalTransport(**options)
    if name == "ray":
        from shards.ray_transport import RayTransport

        return RayTransport(**options)
    raise ValueError(f"transport must be one of {TRANSPORTS}, not {name!r}")
