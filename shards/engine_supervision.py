"""A `LocalEngine`'s supervision tick: ping the workers, fence the silent, expire what
waited too long, and restart the fenced (`shards.supervisor` decides; this performs it).

`EngineSupervision` is a part of `shards.engine.LocalEngine` (a base class), kept apart so
that each file holds one concept. It uses the engine's `_lock`, `_supervisor`,
`_dispatcher`, `_channels`, `_nonces` and `_stopping`, and its `_take_out_fenced`,
`_perform`, `_tell_operator` and `_spawn`.

Invariants: a worker fenced in a tick, and those whose exit `settled`, are all taken out of
the dispatcher before any of their requests goes on elsewhere; what waited for a usable
worker is sent on in the same tick; a worker whose channel is closed is never routable,
even before its exit is handled; restarts (which block) run off the lock, on a thread.
"""
from __future__ import annotations

import asyncio
import time

from shards.engine_messages import unlink_segments
from shards.protocol import Ping
from shards.routability import Routability
from shards.supervisor import SupervisorPlan

SUPERVISE_INTERVAL_S = 0.1


class EngineSupervision:
    """The supervising side of a `LocalEngine`."""

    async def _supervise(self) -> None:
        """Ping, fence the silent, restart the fenced, expire what waited too long."""
        while not self._stopping:
            await asyncio.sleep(SUPERVISE_INTERVAL_S)
            plan, lines = self._supervise_tick(time.monotonic())
            for line in lines:
                self._tell_operator(line)
            for worker_id in plan.restart:
                await asyncio.to_thread(self._spawn, worker_id)

    def _supervise_tick(self, now: float) -> tuple[SupervisorPlan, list[str]]:
        """One tick's pings, fences and expiries: the plan (restarts are the caller's) and the
        operator's lines. It takes out of the dispatcher the workers it fences and those whose
        exit `settled`, all fenced before any of their requests goes on, and then sends on what
        waited for a usable worker (one heard from again)."""
        with self._lock:
            plan = self._supervisor.plan(now)
            out = self._dispatcher.expire(now)
            for worker_id, reason in plan.fence:
                self._supervisor.fence(worker_id, now, reason)
            removed, lines = self._take_out_fenced({worker_id for worker_id, _ in plan.fence}, now)
            out.extend(removed)
            for worker_id in plan.ping:
                self._channels[worker_id].send(Ping(next(self._nonces), now))
            out.extend(self._dispatcher.pump(now))
            self._perform(out)
        unlink_segments(out.unlink)
        return plan, lines

    def _routable(self, worker_id: str, now: float) -> Routability:
        """How the router may send `worker_id` work (under the lock): `Supervisor.routability`,
        and NONE while its channel is closed (even if its exit is not handled yet)."""
        channel = self._channels.get(worker_id)
        alive = channel is not None and channel.is_alive()
        return self._supervisor.routability(worker_id, now) if alive else Routability.NONE
