"""Many clients leaving at random moments (queued, prefilling, mid-stream; n > 1, several
prompts, the Responses API) leave nothing behind: no request on a worker, no limiter slot,
no KV block still referenced, and the next request is served."""
import asyncio
import random

import httpx

from tests.gateway.test_disconnect import in_flight, wait_until, workers_idle

BODIES = {
    "/v1/chat/completions": lambda rng: {
        "model": "tiny", "max_tokens": rng.choice((8, 400)), "n": rng.choice((1, 2, 3)), "stream": rng.random() < 0.7,
        "messages": [{"role": "user", "content": "Talk about the sea. " * rng.randint(1, 60)}]},
    "/v1/completions": lambda rng: {
        "model": "tiny", "max_tokens": rng.choice((8, 400)), "stream": rng.random() < 0.5,
        "prompt": ["Once upon a time " * rng.randint(1, 40), "In a land far away"][: rng.choice((1, 2))]},
    "/v1/responses": lambda rng: {
        "model": "tiny", "max_output_tokens": rng.choice((8, 400)), "stream": rng.random() < 0.7, "store": False,
        "input": "Describe a storm. " * rng.randint(1, 40)},
}


async def _leave_at_random(client: httpx.AsyncClient, headers: dict, rng: random.Random) -> None:
    path = rng.choice(sorted(BODIES))
    body = BODIES[path](rng)
    try:
        async with asyncio.timeout(rng.uniform(0.01, 0.4)):
            async with client.stream("POST", path, headers=headers, json=body) as response:
                async for _ in response.aiter_bytes():
                    pass
    except TimeoutError:
        pass


async def num_referenced_blocks(gateway) -> int:
    """KV blocks the workers hold for requests still running (fresh stats)."""
    engine = gateway.state.backends["tiny"].engine
    await engine.refresh_stats()
    rows = engine.metrics()
    assert rows and all("num_referenced_blocks" in row for row in rows)
    return sum(row["num_referenced_blocks"] for row in rows)


async def test_random_disconnects_leave_nothing_behind(gateway):
    rng = random.Random(13)
    headers = gateway.headers("cancel")
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
        for _ in range(4):
            await asyncio.gather(*(_leave_at_random(client, headers, rng) for _ in range(10)))
        assert await wait_until(lambda: in_flight(gateway) == 0, 10.0)
        assert await wait_until(lambda: gateway.state.limiters["cancel"].num_active == 0, 5.0)
        assert gateway.state.limiters["cancel"].num_queued == 0
        assert await workers_idle(gateway)
        assert await num_referenced_blocks(gateway) == 0
        reply = await client.post("/v1/chat/completions", headers=headers, json={
            "model": "tiny", "max_tokens": 3, "messages": [{"role": "user", "content": "still there?"}]})
        assert reply.status_code == 200


async def test_a_running_request_holds_blocks_until_its_client_leaves(gateway):
    """The probe the test above relies on: nonzero while a stream runs, zero after."""
    from tests.gateway.test_disconnect import LONG

    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
        async with client.stream("POST", "/v1/chat/completions", headers=gateway.headers("cancel"),
                                 json=dict(LONG, stream=True)) as response:
            lines = response.aiter_lines()
            for _ in range(6):
                await anext(lines)
            assert await num_referenced_blocks(gateway) > 0
    assert await wait_until(lambda: in_flight(gateway) == 0, 5.0)
    assert await num_referenced_blocks(gateway) == 0
