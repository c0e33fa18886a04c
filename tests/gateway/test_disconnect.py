"""A client that leaves cancels its work on the worker (streaming and not, queued or not)."""
import asyncio
import time

import httpx
import pytest

LONG = {"model": "tiny", "max_tokens": 4000, "temperature": 1.0, "ignore_eos": True,
        "messages": [{"role": "user", "content": "Go on forever."}]}


def in_flight(gateway) -> int:
    workers = gateway.state.backends["tiny"].engine.health()["workers"]
    return sum(w["in_flight"] for w in workers.values())


async def wait_until(predicate, timeout_s: float = 5.0) -> bool:
    deadline_s = time.monotonic() + timeout_s
    while time.monotonic() < deadline_s:
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return predicate()


async def workers_idle(gateway) -> bool:
    engine = gateway.state.backends["tiny"].engine
    await engine.refresh_stats()
    return all(row.get("num_running", 0) == 0 for row in engine.metrics())


@pytest.fixture
async def client(gateway):
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
        yield client


async def test_disconnect_mid_stream_cancels_on_worker(gateway, client):
    async with client.stream("POST", "/v1/chat/completions", headers=gateway.headers("cancel"),
                             json=dict(LONG, stream=True)) as response:
        assert response.status_code == 200
        lines = response.aiter_lines()
        for _ in range(6):
            await anext(lines)
        assert in_flight(gateway) == 1
    assert await wait_until(lambda: in_flight(gateway) == 0, 3.0)
    assert await wait_until(lambda: gateway.state.limiters["cancel"].num_active == 0, 3.0)
    assert await workers_idle(gateway)


async def test_disconnect_during_whole_reply_cancels_on_worker(gateway, client):
    with pytest.raises(httpx.ReadTimeout):
        await client.post("/v1/chat/completions", headers=gateway.headers("cancel"), json=LONG,
                          timeout=0.5)
    assert await wait_until(lambda: in_flight(gateway) == 0, 3.0)
    assert await wait_until(lambda: gateway.state.limiters["cancel"].num_active == 0, 3.0)
    assert await workers_idle(gateway)


async def test_disconnect_before_first_token_while_queued(gateway, client):
    limiter = gateway.state.limiters["cancel"]
    async with client.stream("POST", "/v1/chat/completions", headers=gateway.headers("cancel"),
                             json=dict(LONG, stream=True)) as running:
        lines = running.aiter_lines()   # NOTE: keep a reference: a collected iterator closes
        await anext(lines)              # the response, which is a disconnect

        for stream in (True, False):
            with pytest.raises(httpx.ReadTimeout):
                await client.post("/v1/chat/completions", headers=gateway.headers("cancel"),
                                  json=dict(LONG, stream=stream), timeout=0.3)
            assert await wait_until(lambda: limiter.num_queued == 0, 3.0)
        assert in_flight(gateway) == 1   # the queued requests never reached a worker
    assert await wait_until(lambda: in_flight(gateway) == 0 and limiter.num_active == 0, 3.0)


async def test_disconnect_mid_stream_from_upstream_frees_the_slot(gateway, client):
    body = {"model": "fake", "stream": True, "messages": [{"role": "user", "content": "slow"}]}
    async with client.stream("POST", "/v1/chat/completions", headers=gateway.headers("cancel"),
                             json=body) as response:
        lines = response.aiter_lines()
        await anext(lines)
    assert await wait_until(lambda: gateway.state.limiters["cancel"].num_active == 0, 3.0)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/embeddings",
                                  "/v1/responses/input_tokens"])
async def test_client_that_leaves_while_sending_its_body_is_no_server_error(gateway, client,
                                                                            caplog, path):
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.server.port)
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {gateway.headers('alpha')['Authorization'].split()[-1]}\r\n"
            "Content-Length: 5000\r\n\r\n")
    writer.write(head.encode() + b'{"model": "tiny", "messages": [')  # a fraction of the body
    await writer.drain()
    await asyncio.sleep(0.2)
    writer.close()
    await writer.wait_closed()
    await asyncio.sleep(0.3)
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
    reply = await client.get("/v1/models", headers=gateway.headers("alpha"))
    assert reply.status_code == 200


async def test_a_stream_its_client_cut_is_traced_with_the_tokens_generated_until_then(tiny_gateway):
    from agents_trace.step_queries import list_steps
    from tests.conftest import TINY_GATEWAY_KEYS

    headers = {"authorization": f"Bearer {TINY_GATEWAY_KEYS['tenant1']}", "x-session-id": "cut-counted"}
    async with httpx.AsyncClient(base_url=tiny_gateway.base_url, timeout=60) as client:
        async with client.stream("POST", "/v1/chat/completions", headers=headers,
                                 json=dict(LONG, stream=True)) as response:
            assert response.status_code == 200
            lines = response.aiter_lines()
            received = 0
            while received < 12:
                line = await anext(lines)
                received += line.startswith("data: {")
    tracer = tiny_gateway.state.tracer
    deadline_s = time.monotonic() + 15
    while not (steps := list_steps(tracer.store_path, "tenant1", "cut-counted")["data"]):
        assert time.monotonic() < deadline_s, "the cut step was not traced"
        tracer.flush(1)
        await asyncio.sleep(0.05)
    (step,) = steps
    assert step["error"] == "client_closed"
    assert 11 <= step["num_output_tokens"] < 4000   # the chunks it read (after the role chunk) at least
