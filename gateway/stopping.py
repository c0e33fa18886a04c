"""What the gateway does once its stop began (a SIGTERM or Ctrl+C, before the connections
drain): `begin_stop`'s first steps, and SIGHUP ignored from then on.
"""
from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

from gateway.hangups_at_exit import HANGUP_WHILE_STOPPING
from gateway.state import GatewayState

log = logging.getLogger("stepahead.gateway")


def begin_stop(state: GatewayState) -> None:
    """The gateway's first steps once its stop began (on the loop), before the connections
    drain: background responses, running and queued, and any a request in flight starts
    later, are cancelled at once (stored `cancelled` with their output so far; docs/api.md),
    not left generating through the drain. Idempotent; the lifespan's end stops them too.
    Batches send no further request (those in flight finish if the drain lets them; they
    go on at the next start).
    NOTE: the one place for anything else that must stop at the signal."""
    state.background.stop_all()
    state.batches.begin_stop()


def hangups_ignored_once_stopping(loop: asyncio.AbstractEventLoop,
                                  on_stop: Callable[[], None] = lambda: None) -> Callable[[], None]:
    """Chain to SIGINT's and SIGTERM's handlers (the server's, which begin its stop): once
    either came, `on_stop` runs on the loop (`begin_stop`, under `uvicorn --factory` too)
    and a SIGHUP only logs that it is ignored; the lifespan's end, which removes the
    reload handler, comes only after the connections drained. Returns what unchains them
    (a no-op where signals cannot be caught: not the main thread)."""
    def stopping() -> None:
        on_stop()
        loop.add_signal_handler(signal.SIGHUP, log.warning, HANGUP_WHILE_STOPPING)

    chained: dict[int, tuple] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        before = signal.getsignal(signum)
        if not callable(before):
            continue

        def chain(sig, frame, before=before) -> None:
            loop.call_soon_threadsafe(stopping)   # first: SIGINT's default handler raises
            before(sig, frame)
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
