"""Many clients leaving at random moments (queued, prefilling, mid-stream; n > 1, several
prompts, the Responses API) leave nothing behind: no request on a worker, no limiter slot,
no KV block still referenced, and the next request is served."""
import asyncio
import random
import re

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


async def test_background_runs_left_cancelled_and_deleted_at_random_all_end_and_leave_nothing(gateway):
    """Background responses whose streams are left, which are cancelled or deleted at random
    moments, or left alone: every one ends in a final status, and nothing stays held."""
    rng = random.Random(29)
    headers = gateway.headers("alpha")
    final = {"completed", "incomplete", "failed", "cancelled"}

    async def one(client: httpx.AsyncClient) -> tuple[str, str]:
        body = {"model": "tiny", "max_output_tokens": rng.choice((8, 300)), "background": True,
                "stream": rng.random() < 0.5, "input": "Describe a storm. " * rng.randint(1, 30)}
        # A quarter leave before any answer can come; the rest leave a random moment after
        # the response's id came out (how soon it comes is the machine's, not the test's).
        leave_early = rng.random() < 0.25
        linger_s = rng.uniform(0.0, 0.3)
        response_id = None
        try:
            async with asyncio.timeout(rng.uniform(0.002, 0.02) if leave_early else 60.0) as scope:
                async with client.stream("POST", "/v1/responses", headers=headers, json=body) as response:
                    async for line in response.aiter_lines():
                        found = re.search(r'"id":\s*"(resp_\w+)"', line)
                        if response_id is None and found:
                            response_id = found.group(1)
                            scope.reschedule(asyncio.get_running_loop().time() + linger_s)
        except TimeoutError:
            pass
        if response_id is None:
            assert leave_early, "a background response gave no id within 60 s"
            return "", "never answered"
        action = rng.choice(("cancel", "delete", "leave"))
        await asyncio.sleep(rng.uniform(0, 0.2))
        if action == "cancel":
            await client.post(f"/v1/responses/{response_id}/cancel", headers=headers)
        elif action == "delete":
            assert (await client.delete(f"/v1/responses/{response_id}", headers=headers)).status_code == 200
        return response_id, action

    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
        outcomes = await asyncio.gather(*(one(client) for _ in range(20)))
        assert await wait_until(lambda: gateway.state.background.num_running() == 0, 60.0)
        assert sum(1 for response_id, _ in outcomes if response_id) >= 16  # seed 29: 16 of 20 not left early
        for response_id, action in outcomes:
            if not response_id:
                continue
            answer = await client.get(f"/v1/responses/{response_id}", headers=headers)
            if action == "delete":
                assert answer.status_code == 404
            else:
                assert answer.status_code == 200 and answer.json()["status"] in final, (action, answer.text)
        assert await wait_until(lambda: in_flight(gateway) == 0, 10.0)
        assert gateway.state.limiters["alpha"].num_active == 0 and gateway.state.limiters["alpha"].num_queued == 0
        assert await workers_idle(gateway)
        assert await num_referenced_blocks(gateway) == 0
