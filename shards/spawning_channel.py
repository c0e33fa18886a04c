"""A worker incarnation's channel while its process is being started (`EngineStart._spawn`,
shards/engine_start.py): the engine registers it under its lock and the transport starts the
process outside it, so a fork server that is slow (importing torch) or stopped never holds
the lock that requests and /health take (QA137).
"""
from __future__ import annotations

import threading
import time


class SpawningChannel:
    """An incarnation's channel in the engine's `_channels` while the transport starts its
    process outside the engine's lock (`EngineStart._spawn`); replaced by the transport's
    channel once that returns.

    Invariants: what is sent to it reaches the worker once the process runs, in order and
    before anything sent to the channel itself (`attach`, under the engine's lock); a
    `kill` (a fence, an abandoned start, a `stop` past its timeout) kills the process as
    soon as it exists; once the spawn failed it is a dead channel (not alive, drops what is
    sent). NOTE: `send` never blocks, as the transport's channels."""

    def __init__(self, worker_id: str, incarnation: int) -> None:
        self.worker_id = worker_id
        self.incarnation = incarnation
        self._lock = threading.Lock()
        self._channel = None   # the transport's, once its spawn returned
        self._held: list = []   # sent before then, in order
        self._killed = False
        self._settled = threading.Event()   # the spawn returned or failed

    def attach(self, channel) -> None:
        """The transport's spawn returned `channel`: hand it what was sent, kill it if asked."""
        with self._lock:
            for message in self._held:
                channel.send(message)
            self._held = []
            self._channel = channel
            killed = self._killed
        self._settled.set()
        if killed:
            channel.kill()

    def fail(self) -> None:
        """The transport's spawn raised: no process, nothing to send to."""
        with self._lock:
            self._held = []
        self._settled.set()

    def send(self, message) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.send(message)
            elif not self._settled.is_set():
                self._held.append(message)

    def is_alive(self) -> bool:
        with self._lock:
            channel, killed = self._channel, self._killed
        if channel is not None:
            return channel.is_alive()
        return not killed and not self._settled.is_set()

    def pid(self) -> int | None:
        channel = self._channel
        return channel.pid() if channel is not None else None

    def kill(self) -> None:
        with self._lock:
            self._killed = True
            channel = self._channel
        if channel is not None:
            channel.kill()

    def stop(self, timeout_s: float) -> None:
        """Stop the process once it runs (the caller sent Shutdown, held until then); kill
        it, whenever it starts, if the spawn has not returned within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        if not self._settled.wait(timeout_s):
            self.kill()
            return
        channel = self._channel
        if channel is not None:
            channel.stop(max(0.0, deadline - time.monotonic()))
