"""What the gateway does once its stop began (a SIGTERM or Ctrl+C, before the connections
drain): `begin_stop`'s first steps, and SIGHUP ignored from then on.

Invariant: a SIGHUP that comes after the stop's signal never reloads, even one the loop
serves before it ran what the signal asked of it (`stop_began`, QA145).
"""
from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass

from gateway.hangups_at_exit import HANGUP_WHILE_STOPPING
from gateway.state import GatewayState

log = logging.getLogger("stepahead.gateway")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def begin_stop(state: GatewayState) -> None:
    """The gateway's first steps once its stop began (on the loop), before the connections
    drain: background responses, running and queued, and any a request in flight starts
    later, are stopped at once (stored `failed`, saying the gateway stopped, with their output
    so far; `cancelled` is only a client's cancel; docs/api.md),
    not left generating through the drain. Idempotent; the lifespan's end stops them too.
    Batches send no further request (those in flight finish if the drain lets them; they
    go on at the next start).
    NOTE: the one place for anything else that must stop at the signal."""
    state.background.stop_all()
    state.batches.begin_stop()


@dataclass
class StopBegan:
    """Shared by the handlers `hangups_ignored_once_stopping` chains: whether one ran."""
    began: bool = False


@dataclass(eq=False)
class ChainedStop:
    """SIGINT's or SIGTERM's handler, chained to the server's (`before`): marks the stop
    begun in the handler itself, at once (the loop runs `stopping` a step later, and may
    serve a SIGHUP that came right after the signal first), then calls `before`."""
    before: Callable
    stop: StopBegan
    loop: asyncio.AbstractEventLoop
    stopping: Callable[[], None]

    def __call__(self, signum, frame) -> None:
        self.stop.began = True
        self.loop.call_soon_threadsafe(self.stopping)   # before `before`: SIGINT's default handler raises
        self.before(signum, frame)


def stop_began() -> bool:
    """Whether SIGINT or SIGTERM began the stop, as the handlers chained by
    `hangups_ignored_once_stopping` say while in place: true from the signal's handler on."""
    return any(isinstance(handler := signal.getsignal(signum), ChainedStop) and handler.stop.began
               for signum in STOP_SIGNALS)


def hangups_ignored_once_stopping(loop: asyncio.AbstractEventLoop,
                                  on_stop: Callable[[], None] = lambda: None) -> Callable[[], None]:
    """Chain to SIGINT's and SIGTERM's handlers (the server's, which begin its stop): once
    either came, `on_stop` runs on the loop (`begin_stop`, under `uvicorn --factory` too)
    and a SIGHUP only logs that it is ignored (`stop_began` says so from the signal on, for
    the reload handler); the lifespan's end, which removes the reload handler, comes only
    after the connections drained. Returns what unchains them (a no-op where signals
    cannot be caught: not the main thread)."""
    def stopping() -> None:
        on_stop()
        loop.add_signal_handler(signal.SIGHUP, log.warning, HANGUP_WHILE_STOPPING)

    stop = StopBegan()
    chained: dict[int, tuple] = {}
    for signum in STOP_SIGNALS:
        before = signal.getsignal(signum)
        if not callable(before):
            continue
        chain = ChainedStop(before, stop, loop, stopping)
        try:
            signal.signal(signum, chain)
        except ValueError:
            break
        chained[signum] = (before, chain)

    def unchain() -> None:
        for signum, (before, chain) in chained.items():
            if signal.getsignal(signum) is chain:
                signal.signal(signum, before)
    return unchain
