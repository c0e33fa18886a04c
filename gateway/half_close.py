"""A client's half-close: it shut down its sending side after its requests (`shutdown(SHUT_WR)`,
`nc -N`, some proxies), and still reads the answers (RFC 9112 §9.6). The gateway's HTTP/1.1
connections (`gateway/http_protocol.py`) keep such a connection open for the answers owed
on it; asyncio closes a connection at EOF unless its protocol keeps it, and uvicorn's does
not, so every such request was taken for a client gone: no answer (QA190).

EOF alone cannot tell a half-close from a client that closed its socket: both send the same
FIN. One that closed it must still end as gone (its request's `http.disconnect`, a 499, the
worker freed), so a half-closed connection that owes answers is watched by `EofWatch`:

An EOF that comes while an answer is being written, or on an HTTP/1.0 request (RFC 9110
forbids it a 1xx), is taken for a close at once (`gateway/http_protocol.py`): a stream may
write nothing for long (a queue, a held upstream), and so would draw no reset to tell a
closed socket by. The watch serves the EOF that comes before any answer is under way, as a
half-close does (right after its requests).

Invariants: an interim `100 Continue` (`PROBE`; every HTTP/1.1 client takes and skips a 1xx
it did not ask for, RFC 9110 §15.2, and may get several) goes out at EOF, and again every
`PROBE_EVERY_S` while the next answer has not begun (a client that read the first probe
and then closed its socket sends nothing more: only a later byte draws its reset, QA195;
so a request that asked `Expect: 100-continue` may get two or more); never after an answer
began, so never inside one or after a final one. A socket the other end closed answers any
byte (a probe, or an answer being streamed) with a reset, which the socket reports
(`SO_ERROR`). The watch reads that every `CHECK_INTERVAL_S` while answers are owed and,
once reset, calls `on_gone` (the connection drops, each request still unanswered learns its
client left); it writes nothing but probes and stops when the answers are written or the
connection closes. A client that closed is noticed a round trip after the next probe or the
next byte of its answer (a stream's next chunk), not at its FIN.
"""
from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from dataclasses import dataclass

PROBE = b"HTTP/1.1 100 Continue\r\n\r\n"
CHECK_INTERVAL_S = 0.1
PROBE_EVERY_S = 1.0


def peer_reset(transport: asyncio.BaseTransport) -> bool:
    """Whether the other end reset the connection under `transport` (it got bytes after it
    closed its socket); an error reading that counts as reset."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0
    except OSError:
        return True


@dataclass(slots=True)
class EofWatch:
    """Watches a connection whose client sent EOF while `unanswered()` (its requests not
    answered in full, oldest first) is not empty; see the module's invariants."""
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    unanswered: Callable[[], list]
    on_gone: Callable[[], None]
    interval_s: float = CHECK_INTERVAL_S
    probe_every_s: float = PROBE_EVERY_S
    timer: asyncio.TimerHandle | None = None
    probed_at_s: float = 0.0   # loop time of the last probe

    def start(self) -> None:
        """Send the probe (no answer is being written: http_protocol), and begin the checks."""
        self._probe()
        self._schedule()

    def _probe(self) -> None:
        """A probe, unless the next answer owed has begun."""
        cycles = self.unanswered()
        if cycles and not cycles[0].response_started:
            self.transport.write(PROBE)
            cycles[0].waiting_for_100_continue = False   # the probe is its `100 Continue`, if it asked
            self.probed_at_s = self.loop.time()

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _schedule(self) -> None:
        self.timer = self.loop.call_later(self.interval_s, self._check)

    def _check(self) -> None:
        self.timer = None
        if self.transport.is_closing() or not self.unanswered():
            return
        if peer_reset(self.transport):
            self.on_gone()
            return
        if self.loop.time() - self.probed_at_s >= self.probe_every_s:
            self._probe()
        self._schedule()
