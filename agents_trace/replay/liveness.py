"""Telling a gateway that stopped answering mid-replay from a few failed requests.

A request that fails on its connection (refused, reset, a connect timeout) makes the
watch probe the gateway's /v1/models a few times over about PROBE_DELAYS_S's span. The
replay stops (GatewayStopped) only when none of those probes got an answer, each failing
the same way, and no request got one meanwhile; any HTTP answer, an error status
included, shows it is alive, and so does a probe that connects but gets no answer in time
(a slow gateway is not a dead one). So transient
errors and a slow gateway never stop a replay, and a dead one stops it about two seconds
after the first request that could not connect, instead of pacing the rest of the trace
through connection errors. While a probe runs no new request goes out (`before_send`):
the requests the replay would send to a gateway that may be gone would only add
connection errors of its own making to the report; those in flight still end as they do.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import aiohttp

PROBE_DELAYS_S = (0.0, 0.5, 1.5)   # waits before each probe: three over about 2 s
PROBE_TIMEOUT_S = 5.0


class GatewayStopped(RuntimeError):
    """The gateway stopped answering mid-replay (its args: the last connection error)."""


def not_answering(exc: BaseException) -> bool:
    """Whether `exc` means the gateway did not take the request at all: no connection
    (refused, connect timeout) or one closed or reset before any answer."""
    return isinstance(exc, (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError, aiohttp.ConnectionTimeoutError))


@dataclass(slots=True)
class GatewayWatch:
    """The replay's view of whether its gateway still answers. `answers` counts requests
    that got an HTTP answer; one probe runs at a time, every failed request waiting on it,
    and every request about to be sent too (`before_send`). A probe's result is why the
    replay stops (None: the gateway is alive), so every waiter raises the same GatewayStopped."""

    client: aiohttp.ClientSession
    base_url: str
    api_key: str
    answers: int = 0
    _probe: asyncio.Future | None = field(default=None, repr=False)

    def note_answer(self) -> None:
        self.answers += 1

    def close(self) -> None:
        """Cancels a probe still running (the replay ended or was stopped)."""
        if self._probe is not None:
            self._probe.cancel()

    async def note_connection_error(self, error: str) -> None:
        """Called after a request failed on its connection; raises GatewayStopped when
        the gateway no longer answers. A probe already running is waited on, not repeated."""
        if self._probe is None or self._probe.done():
            self._probe = asyncio.ensure_future(self._stopped(error))
        await self._await_probe()

    async def before_send(self) -> None:
        """Called before each request is sent: waits for a probe in flight to end, then
        returns when it found the gateway alive, or raises GatewayStopped when it found it
        gone (so no request goes to a gateway being probed). No probe: returns at once."""
        if self._probe is not None:
            await self._await_probe()

    async def _await_probe(self) -> None:
        stopped = await asyncio.shield(self._probe)
        if stopped is not None:
            raise GatewayStopped(stopped)

    async def _stopped(self, error: str) -> str | None:
        """Why the replay stops (the request's `error` and what the probes got), or None
        when the gateway showed it is alive."""
        last_error = await self._gone()
        if last_error is None:
            return None
        also = "" if last_error == error else f": {last_error}"
        return (f"{error}; {len(PROBE_DELAYS_S)} probes of /v1/models over "
                f"{sum(PROBE_DELAYS_S):g} s got no answer either{also}")

    async def _gone(self) -> str | None:
        """The last probe's connection error when no probe got an answer and no request
        was answered meanwhile; None when the gateway showed it is alive."""
        answers_before = self.answers
        timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
        last_error = None
        for delay in PROBE_DELAYS_S:
            await asyncio.sleep(delay)
            if self.answers != answers_before:
                return None
            try:
                async with self.client.get(f"{self.base_url}/v1/models", timeout=timeout,
                                           headers={"Authorization": f"Bearer {self.api_key}"}) as response:
                    await response.read()
                return None
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                if not not_answering(exc):
                    return None   # it connected and is slow: not gone
                last_error = f"{type(exc).__name__}: {exc}"
        return None if self.answers != answers_before else last_error
