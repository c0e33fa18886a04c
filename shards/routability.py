"""Whether a worker may be sent work now, as the engine judges it, and which workers a
request may go to (`usable_workers`). Pure, no I/O.

The engine's `routable(worker_id, now_s)` callback answers a `Routability`:
- NONE: being fenced, its channel closed (its exit not handled yet) or silent past the
  health timeout: never sent work (a request with no other worker waits in the queue);
- QUIET: ready but silent past `quiet_after_s` (it missed its last pings, its fence may
  be one tick away): sent work only while no FRESH worker is ready;
- FRESH: heard from recently.
A plain bool answer reads as FRESH (True) or NONE (False).

Invariant: `usable_workers` returns a subset of the workers it is given, never one whose
routability is NONE, and a QUIET one only when none of them is FRESH; so the requests a fence
sends on wait for a healthy worker (or a restarted one) instead of landing on a worker being
fenced, found dead, or hung.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import IntEnum

QUIET_AFTER_PINGS = 2.0   # a worker silent for this many ping intervals missed its last ping
# ... and for this share of the health timeout: a worker in one long forward pass (a prefill
# chunk on a busy CPU) answers no ping meanwhile, and must keep its sessions' requests
QUIET_AFTER_TIMEOUT_SHARE = 0.5


class Routability(IntEnum):
    NONE = 0
    QUIET = 1
    FRESH = 2


RoutableCallback = Callable[[str, float], "Routability | bool"]


def quiet_after_s(ping_interval_s: float, health_timeout_s: float) -> float:
    """Silence past which a ready worker counts as QUIET: two ping intervals (so one
    missed ping and tick jitter never do) and half the health timeout (so a long forward
    pass on a busy machine does not send its sessions elsewhere: 15 s at the defaults),
    at most the health timeout."""
    return min(health_timeout_s, max(QUIET_AFTER_PINGS * ping_interval_s,
                                     QUIET_AFTER_TIMEOUT_SHARE * health_timeout_s))


def routability(routable: RoutableCallback | None, worker_id: str, now_s: float) -> Routability:
    """The callback's answer as a `Routability` (None: every worker is FRESH)."""
    if routable is None:
        return Routability.FRESH
    answer = routable(worker_id, now_s)
    if answer is True:
        return Routability.FRESH
    if answer is False:
        return Routability.NONE
    return Routability(answer)


def usable_workers(workers: Iterable[str], routable: RoutableCallback | None, now_s: float) -> list[str]:
    """Of `workers`, sorted, those a request may be sent to now: the FRESH ones, or the
    QUIET ones when none is FRESH; empty when none is routable."""
    ranks = {worker_id: routability(routable, worker_id, now_s) for worker_id in workers}
    best = max(ranks.values(), default=Routability.NONE)
    if best is Routability.NONE:
        return []
    return sorted(worker_id for worker_id, rank in ranks.items() if rank is best)
