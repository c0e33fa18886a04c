"""QA154 (note "LRU can evict a conversation in use"): with `conversations_per_tenant = 2`,
a conversation with a background response running on it was evicted by the tenant's LRU
when newer conversations were made; the response still ended `completed`, and its turn's
items went nowhere (an INFO line only). The LRU now leaves a conversation a response holds
(`conversation_locks`) and evicts the least recently used one nobody holds; when every one
that could leave is held, making a new conversation is a 429 `rate_limit_exceeded` with
`Retry-After`, as one background response too many is. The held turns ask the fake
upstream's "slow" (about 2 s, streamed) or "hang" (no answer for 60 s, so they run until
cancelled)."""
import asyncio
import itertools
import os

import httpx
import pytest

from gateway.conversation_archive import Conversation, ConversationArchive, Missing
from gateway.conversation_locks import ConversationLocks
from tests.gateway.conftest import KEYS
from tests.gateway.test_disconnect import wait_until

TENANTS = ("alpha", "beta")


def _archive(capacity: int) -> ConversationArchive:
    ticks = itertools.count()
    return ConversationArchive(None, capacity, clock=lambda: float(next(ticks)))


def test_the_archive_evicts_the_least_recently_used_conversation_nobody_holds():
    from gateway.conversation_archive import Full

    archive = _archive(capacity=2)
    archive.create("a", Conversation("c0", 1, {}), [])
    archive.create("a", Conversation("c1", 1, {}), [])
    archive.create("a", Conversation("c2", 1, {}), [], frozenset({"c0"}))   # c0 is the oldest, but held
    assert archive.get("a", "c0").id == "c0" and archive.get("a", "c2").id == "c2"
    with pytest.raises(Missing):
        archive.get("a", "c1")
    with pytest.raises(Full) as refused:   # both that could leave are held: nothing is made, nothing leaves
        archive.create("a", Conversation("c3", 1, {}), [], frozenset({"c0", "c2"}))
    assert (refused.value.capacity, refused.value.held) == (2, 2)
    with pytest.raises(Missing):
        archive.get("a", "c3")
    assert {archive.get("a", c).id for c in ("c0", "c2")} == {"c0", "c2"}
    archive.create("b", Conversation("b0", 1, {}), [], frozenset({"c0", "c2"}))   # another tenant's: room
    archive.create("a", Conversation("c4", 1, {}), [], frozenset({"c2"}))   # c0 released: it leaves now
    with pytest.raises(Missing):
        archive.get("a", "c0")
    assert {archive.get("a", c).id for c in ("c2", "c4")} == {"c2", "c4"}


def test_held_by_names_only_that_tenants_held_conversations():
    locks = ConversationLocks()
    hold = locks.take("a", "c1")
    locks.take("b", "c2")
    assert locks.held_by("a") == frozenset({"c1"}) and locks.held_by("c") == frozenset()
    hold.release()
    assert locks.held_by("a") == frozenset()


@pytest.fixture(scope="module")
def small_gateway(fake_upstream, tmp_path_factory):
    from gateway.app import build_app
    from gateway.config import key_digest, parse_config
    from tests.conftest import ServedGateway
    from tests.gateway.serving import start_server

    os.environ["STEPAHEAD_TEST_FAKE_KEY"] = "sk-upstream-secret"
    app = build_app(parse_config({
        # files of its own: the session's gateway keeps its tenants' conversations in the
        # process's default file, which an LRU of 2 would empty under its tests
        "server": {"conversations_per_tenant": 2,
                   "responses_db": str(tmp_path_factory.mktemp("lru-locked") / "responses.sqlite3")},
        "models": [{"name": "fake", "kind": "upstream", "litellm_model": "openai/fake-model",
                    "api_base": f"{fake_upstream.base_url}/v1", "api_key_env": "STEPAHEAD_TEST_FAKE_KEY"}],
        "tenants": [{"name": name, "api_key_sha256": [key_digest(KEYS[name])]} for name in TENANTS]}))
    server = start_server(app)
    yield ServedGateway(server, app)
    server.stop()


def _headers(tenant: str) -> dict:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


async def _new(http: httpx.AsyncClient, tenant: str) -> httpx.Response:
    return await http.post("/v1/conversations", headers=_headers(tenant),
                           json={"items": [{"role": "user", "content": "Hello."}]})


async def _made(http: httpx.AsyncClient, tenant: str) -> str:
    made = await _new(http, tenant)
    assert made.status_code == 200, made.text
    return made.json()["id"]


async def _running_on(http: httpx.AsyncClient, gateway, tenant: str, conversation: str, text: str) -> str:
    """A background response on the conversation, once it holds it: its id."""
    started = await http.post("/v1/responses", headers=_headers(tenant),
                              json={"model": "fake", "conversation": conversation, "input": text,
                                    "background": True, "max_output_tokens": 16})
    assert started.status_code == 200, started.text
    assert await wait_until(lambda: (tenant, conversation) in gateway.state.conversation_locks.held, 10.0)
    return started.json()["id"]


async def _status(http: httpx.AsyncClient, tenant: str, conversation: str) -> int:
    return (await http.get(f"/v1/conversations/{conversation}", headers=_headers(tenant))).status_code


async def test_a_conversation_in_use_is_not_evicted_and_its_turn_lands(small_gateway):
    async with httpx.AsyncClient(base_url=small_gateway.base_url, timeout=60) as http:
        in_use = await _made(http, "alpha")
        response_id = await _running_on(http, small_gateway, "alpha", in_use, "slow")
        idle = await _made(http, "alpha")
        newest = await _made(http, "alpha")   # one must leave: the idle one, though in_use is older
        assert await _status(http, "alpha", in_use) == 200
        assert await _status(http, "alpha", idle) == 404
        assert await _status(http, "alpha", newest) == 200

        async def ended() -> dict:
            while True:
                polled = (await http.get(f"/v1/responses/{response_id}", headers=_headers("alpha"))).json()
                if polled["status"] not in ("queued", "in_progress"):
                    return polled
                await asyncio.sleep(0.1)
        assert (await asyncio.wait_for(ended(), 30))["status"] == "completed"
        items = (await http.get(f"/v1/conversations/{in_use}/items", headers=_headers("alpha"),
                                params={"order": "asc"})).json()["data"]
        assert [item.get("role") for item in items] == ["user", "user", "assistant"]   # the turn is in


async def test_a_new_conversation_when_all_that_could_leave_are_in_use_is_a_429(small_gateway):
    async with httpx.AsyncClient(base_url=small_gateway.base_url, timeout=60) as http:
        first, second = await _made(http, "beta"), await _made(http, "beta")
        running = [await _running_on(http, small_gateway, "beta", conversation, "hang")
                   for conversation in (first, second)]
        refused = await _new(http, "beta")
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert (error["code"], error["type"]) == ("rate_limit_exceeded", "rate_limit_error")
        assert "conversations_per_tenant" in error["message"] and refused.headers["retry-after"] == "1"
        assert [await _status(http, "beta", conversation) for conversation in (first, second)] == [200, 200]
        assert (await _new(http, "alpha")).status_code == 200   # another tenant is not held back
        cancelled = await http.post(f"/v1/responses/{running[0]}/cancel", headers=_headers("beta"))
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        assert await wait_until(lambda: ("beta", first) not in small_gateway.state.conversation_locks.held, 10.0)
        third = await _made(http, "beta")   # the released one leaves now
        assert [await _status(http, "beta", c) for c in (first, second, third)] == [404, 200, 200]
        await http.post(f"/v1/responses/{running[1]}/cancel", headers=_headers("beta"))
        assert await wait_until(lambda: not small_gateway.state.conversation_locks.held, 10.0)
