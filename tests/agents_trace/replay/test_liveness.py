"""GatewayWatch stops a replay only when the gateway no longer answers at all."""
from __future__ import annotations

import asyncio

import aiohttp
import pytest

from agents_trace.replay.liveness import GatewayStopped, GatewayWatch
from tests.agents_trace.replay.fake_gateway import start_fake_gateway
from tests.gateway.serving import free_port


async def _note_error(base_url: str, answer_meanwhile: bool = False) -> None:
    async with aiohttp.ClientSession() as client:
        watch = GatewayWatch(client, base_url, "k")
        if answer_meanwhile:
            asyncio.get_running_loop().call_later(0.2, watch.note_answer)
        try:
            await watch.note_connection_error("ClientConnectorError: refused")
        finally:
            watch.close()


def test_a_gateway_that_refuses_every_probe_is_gone():
    base_url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(GatewayStopped, match="got no answer either"):
        asyncio.run(_note_error(base_url))


def test_a_connection_error_is_transient_when_the_gateway_answers_its_probe():
    gateway = start_fake_gateway()
    try:
        asyncio.run(_note_error(gateway.base_url))   # no raise
    finally:
        gateway.stop()


def test_a_request_answered_while_the_probes_run_keeps_the_replay_going():
    asyncio.run(_note_error(f"http://127.0.0.1:{free_port()}", answer_meanwhile=True))   # no raise


async def _send_during_a_probe(base_url: str) -> tuple[list[str], float]:
    """A request fails and its probe starts; a second group about to send waits in
    `before_send`: what each got (the error it raised, or "sent") and how long the sender waited."""
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession() as client:
        watch = GatewayWatch(client, base_url, "k")
        await watch.before_send()   # no probe yet: at once

        async def failed() -> str:
            try:
                await watch.note_connection_error("ClientConnectorError: refused")
            except GatewayStopped as exc:
                return str(exc)
            return "alive"

        async def sender() -> tuple[str, float]:
            await asyncio.sleep(0.05)   # the probe is running
            began = loop.time()
            try:
                await watch.before_send()
            except GatewayStopped as exc:
                return str(exc), loop.time() - began
            return "sent", loop.time() - began

        try:
            first, (second, waited) = await asyncio.gather(failed(), sender())
        finally:
            watch.close()
    return [first, second], waited


def test_no_request_is_sent_while_a_probe_runs_and_none_after_it_finds_the_gateway_gone(monkeypatch):
    """QA210 F1: a group about to send waits for the probe, then stops with the same error."""
    from agents_trace.replay import liveness

    monkeypatch.setattr(liveness, "PROBE_DELAYS_S", (0.0, 0.2, 0.2))
    (first, second), waited = asyncio.run(_send_during_a_probe(f"http://127.0.0.1:{free_port()}"))
    assert first == second and "3 probes of /v1/models over 0.4 s got no answer either" in first
    assert waited >= 0.3   # it waited for the probe's end (0.4 s from its start), not sent meanwhile


def test_a_request_waiting_on_a_probe_that_finds_the_gateway_alive_is_sent(monkeypatch):
    from agents_trace.replay import liveness

    monkeypatch.setattr(liveness, "PROBE_DELAYS_S", (0.3, 0.2, 0.2))   # the first probe 0.3 s after the error
    gateway = start_fake_gateway()
    try:
        (first, second), waited = asyncio.run(_send_during_a_probe(gateway.base_url))
    finally:
        gateway.stop()
    assert (first, second) == ("alive", "sent") and waited >= 0.2
