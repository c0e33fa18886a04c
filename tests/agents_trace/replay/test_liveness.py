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
