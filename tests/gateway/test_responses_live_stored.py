"""A stored foreground response while it is still being answered (QA224 F5): GET answers
it `in_progress`, DELETE forgets it (its end is then not stored), `input_items` lists its
input, cancel and `previous_response_id` are 400s, another tenant gets 404; once it ends
the response store answers for it, as before. The "fake" upstream's "slow" input streams
one chunk per 0.5 s (unstreamed: answers after 3 s), which keeps a response running."""
import asyncio
import json

import httpx
import pytest

from gateway.live_responses import LiveResponse, LiveResponses
from tests.gateway.test_disconnect import wait_until

SLOW = {"model": "fake", "input": "slow", "stream": True}


@pytest.fixture
async def http(gateway):
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=30) as http:
        yield http


async def _created(lines) -> dict:
    """The response `response.created` announced (the events before it are none)."""
    async for line in lines:
        if line.startswith("data: "):
            event = json.loads(line[len("data: "):])
            assert event["type"] == "response.created"
            return event["response"]
    raise AssertionError("the stream ended before response.created")


async def _last_event(lines) -> dict:
    last = None
    async for line in lines:
        if line.startswith("data: "):
            last = json.loads(line[len("data: "):])
    return last


def test_the_registry_finds_a_response_under_its_tenant_until_it_ends_or_is_deleted():
    registry = LiveResponses()
    live = registry.register("alpha", "resp_1", lambda status: {"id": "resp_1", "status": status}, ({"x": 1},))
    assert registry.get("alpha", "resp_1") is live and registry.get("beta", "resp_1") is None
    assert live.response() == {"id": "resp_1", "status": "in_progress"}
    assert not registry.delete("beta", "resp_1") and not live.is_deleted
    assert registry.delete("alpha", "resp_1") and live.is_deleted
    assert registry.get("alpha", "resp_1") is None and not registry.delete("alpha", "resp_1")
    again = registry.register("alpha", "resp_2", lambda status: {}, ())
    again.end()
    again.end()
    assert registry.running == {} and not again.is_deleted
    LiveResponse.nothing().end()   # a request that keeps nothing: nothing to end


async def test_a_running_stream_is_found_in_progress_by_its_tenant_and_stored_when_it_ends(gateway, http):
    alpha, beta = gateway.headers("alpha"), gateway.headers("beta")
    async with http.stream("POST", "/v1/responses", headers=alpha, json=SLOW) as streamed:
        assert streamed.status_code == 200
        lines = streamed.aiter_lines()
        response_id = (await _created(lines))["id"]
        path = f"/v1/responses/{response_id}"
        got = await http.get(path, headers=alpha)
        assert got.status_code == 200
        running = got.json()
        assert (running["id"], running["model"], running["status"]) == (response_id, "fake", "in_progress")
        assert running["store"] is True and running["background"] is False
        assert (await http.get(path, headers=beta)).status_code == 404
        assert (await http.delete(path, headers=beta)).status_code == 404
        assert (await http.get(f"{path}/input_items", headers=beta)).status_code == 404
        items = (await http.get(f"{path}/input_items", headers=alpha)).json()
        assert [item["content"][0]["text"] for item in items["data"]] == ["slow"]
        cancel = await http.post(f"{path}/cancel", headers=alpha)
        assert cancel.status_code == 400 and "background: true" in cancel.json()["error"]["message"]
        restream = await http.get(path, headers=alpha, params={"stream": "true"})
        assert restream.status_code == 400 and restream.json()["error"]["param"] == "stream"
        continued = await http.post("/v1/responses", headers=alpha, json={
            "model": "fake", "input": "more", "previous_response_id": response_id})
        assert continued.status_code == 400
        error = continued.json()["error"]
        assert error["param"] == "previous_response_id" and "still in_progress" in error["message"]
        last = await _last_event(lines)
    assert last["type"] == "response.completed"
    stored = await http.get(path, headers=alpha)
    assert stored.status_code == 200 and stored.json()["status"] == "completed"
    assert stored.json()["output"] == last["response"]["output"]
    assert gateway.state.live_responses.get("alpha", response_id) is None


async def test_a_stream_deleted_while_it_runs_goes_on_but_is_not_stored(gateway, http):
    alpha = gateway.headers("alpha")
    async with http.stream("POST", "/v1/responses", headers=alpha, json=SLOW) as streamed:
        lines = streamed.aiter_lines()
        response_id = (await _created(lines))["id"]
        path = f"/v1/responses/{response_id}"
        deleted = await http.delete(path, headers=alpha)
        assert deleted.status_code == 200
        assert deleted.json() == {"id": response_id, "object": "response.deleted", "deleted": True}
        assert (await http.get(path, headers=alpha)).status_code == 404
        assert (await http.delete(path, headers=alpha)).status_code == 404
        last = await _last_event(lines)
    assert last["type"] == "response.completed"   # the client still reads its stream to the end
    assert (await http.get(path, headers=alpha)).status_code == 404
    assert (await http.get(f"{path}/input_items", headers=alpha)).status_code == 404
    continued = await http.post("/v1/responses", headers=alpha, json={
        "model": "fake", "input": "more", "previous_response_id": response_id})
    assert continued.status_code == 404 and continued.json()["error"]["code"] == "previous_response_not_found"


async def test_a_conversation_turn_deleted_as_a_response_while_it_runs_is_still_added(gateway, http):
    alpha = gateway.headers("alpha")
    conversation = (await http.post("/v1/conversations", headers=alpha, json={})).json()["id"]
    async with http.stream("POST", "/v1/responses", headers=alpha,
                           json=dict(SLOW, conversation=conversation)) as streamed:
        lines = streamed.aiter_lines()
        response_id = (await _created(lines))["id"]
        assert (await http.delete(f"/v1/responses/{response_id}", headers=alpha)).status_code == 200
        last = await _last_event(lines)
    assert last["type"] == "response.completed"
    assert (await http.get(f"/v1/responses/{response_id}", headers=alpha)).status_code == 404
    items = (await http.get(f"/v1/conversations/{conversation}/items", headers=alpha,
                            params={"order": "asc"})).json()["data"]
    assert [item["role"] for item in items] == ["user", "assistant"]


async def test_a_stream_whose_client_left_is_no_longer_found(gateway, http):
    alpha = gateway.headers("alpha")
    async with http.stream("POST", "/v1/responses", headers=alpha, json=SLOW) as streamed:
        lines = streamed.aiter_lines()
        response_id = (await _created(lines))["id"]
        assert gateway.state.live_responses.get("alpha", response_id) is not None
    assert await wait_until(lambda: gateway.state.live_responses.get("alpha", response_id) is None, 5.0)
    assert (await http.get(f"/v1/responses/{response_id}", headers=alpha)).status_code == 404


async def test_an_unstreamed_stored_response_is_found_while_it_runs_and_a_delete_keeps_it_unstored(gateway, http):
    alpha = gateway.headers("alpha")
    running = gateway.state.live_responses.running
    before = {key for key in running if key[0] == "alpha"}
    answer = asyncio.create_task(http.post("/v1/responses", headers=alpha, json={"model": "fake", "input": "slow"}))
    assert await wait_until(lambda: any(key[0] == "alpha" and key not in before for key in list(running)), 5.0)
    response_id = next(key[1] for key in list(running) if key[0] == "alpha" and key not in before)
    got = (await http.get(f"/v1/responses/{response_id}", headers=alpha)).json()
    assert (got["id"], got["status"], got["output"]) == (response_id, "in_progress", [])
    assert (await http.delete(f"/v1/responses/{response_id}", headers=alpha)).status_code == 200
    whole = await answer
    assert whole.status_code == 200 and whole.json()["id"] == response_id and whole.json()["status"] == "completed"
    assert (await http.get(f"/v1/responses/{response_id}", headers=alpha)).status_code == 404
