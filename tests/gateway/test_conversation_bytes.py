"""QA185 F1: `POST /v1/conversations/{id}/items` had no bound on the bytes a tenant's
conversations hold and no limit at all (a tenant filled the shared disk at 37 MB/s, one
stopped with `token_budget = 0` too). Now each tenant's items are capped by `[server]
conversation_bytes_per_tenant` (a 400 `conversation_storage_limit_exceeded`, nothing kept;
counted in the archive's file, so across restarts; freed by deletes and evictions), and
a request that adds items counts against the tenant's `requests_per_minute`."""
from __future__ import annotations

import asyncio
import itertools
import json
import sqlite3

import pytest
from starlette.testclient import TestClient

from gateway.app import build_app
from gateway.config import ConfigError, key_digest, parse_config
from gateway.conversation_archive import Conversation, ConversationArchive, Missing
from gateway.conversation_bytes import DEFAULT_CONVERSATION_BYTES_PER_TENANT, STORAGE_FULL_CODE, OverCap
from gateway.conversation_store import ConversationStore
from gateway.errors import ApiError

KEYS = {"a": "k-conv-bytes-a", "b": "k-conv-bytes-b", "paced": "k-conv-bytes-paced", "stopped": "k-conv-bytes-stop"}
TEXT = "x" * 1000   # an item of about 1,100 bytes: two fit in the routes' cap of 3,000, not three


def _item(text: str, item_id: str) -> dict:
    return {"type": "message", "id": item_id, "status": "completed", "role": "user",
            "content": [{"type": "input_text", "text": text}]}


def _bytes(*items: dict) -> int:
    return sum(len(json.dumps(item, ensure_ascii=False).encode()) for item in items)


def _archive(path=None, capacity: int = 8) -> ConversationArchive:
    ticks = itertools.count()
    return ConversationArchive(path, capacity, clock=lambda: float(next(ticks)))


# --- the archive --------------------------------------------------------------------------

def test_an_add_past_the_cap_keeps_nothing_and_deletes_and_evictions_free_room():
    archive = _archive(capacity=2)
    one, two, three = _item("é" * 40, "msg_1"), _item("b" * 40, "msg_2"), _item("c" * 40, "msg_3")
    cap = _bytes(one, two)   # exactly two fit: "é" counts its two UTF-8 bytes
    archive.create("a", Conversation("c1", 1, {}), [one], cap=cap)
    archive.add_items("a", "c1", [two], cap)
    assert archive.held_bytes("a") == cap
    with pytest.raises(OverCap) as refused:
        archive.add_items("a", "c1", [three], cap)
    assert (refused.value.cap, refused.value.held, refused.value.num_bytes) == (cap, cap, _bytes(three))
    with pytest.raises(OverCap):   # a create with items past it: the conversation is not made either
        archive.create("a", Conversation("c2", 1, {}), [three], cap=cap)
    with pytest.raises(Missing):
        archive.get("a", "c2")
    assert [item["id"] for item in archive.items("a", "c1")] == ["msg_1", "msg_2"]
    assert archive.held_bytes("a") == cap
    archive.create("a", Conversation("c2", 1, {}), [], cap=cap)   # no bytes: never refused
    # another tenant's items have their own room
    archive.create("b", Conversation("c1", 1, {}), [one, two], cap=cap)
    assert archive.held_bytes("b") == cap
    # an item deleted frees its bytes
    archive.delete_item("a", "c1", "msg_1")
    assert archive.held_bytes("a") == _bytes(two)
    archive.add_items("a", "c1", [three], cap)
    # a conversation deleted frees its items' bytes
    archive.delete("a", "c1")
    assert archive.held_bytes("a") == 0
    archive.add_items("a", "c2", [one, two], cap)
    # an eviction (`conversations_per_tenant` 2) frees them too, before the cap is checked
    archive.create("a", Conversation("c3", 1, {}), [], cap=cap)
    archive.create("a", Conversation("c4", 1, {}), [three], cap=cap)   # c2 leaves
    with pytest.raises(Missing):
        archive.get("a", "c2")
    assert archive.held_bytes("a") == _bytes(three) and archive.held_bytes("b") == cap


def test_a_refused_create_evicts_nothing():
    archive = _archive(capacity=1)
    small, big = _item("s", "msg_s"), _item("b" * 200, "msg_b")
    archive.create("a", Conversation("c1", 1, {}), [small], cap=_bytes(small))
    with pytest.raises(OverCap):   # c1 would leave and free its bytes, but `big` alone is past the cap
        archive.create("a", Conversation("c2", 1, {}), [big], cap=_bytes(small))
    assert archive.get("a", "c1").id == "c1" and archive.held_bytes("a") == _bytes(small)


def test_the_count_survives_a_restart_and_an_older_file_is_counted_when_opened(tmp_path):
    path = tmp_path / "conversations.sqlite3"
    archive = _archive(path)
    one, two = _item("one", "msg_1"), _item("two", "msg_2")
    archive.create("a", Conversation("c1", 1, {}), [one, two], cap=10_000)
    archive.close()
    archive = _archive(path)
    try:
        assert archive.held_bytes("a") == _bytes(one, two)
        with pytest.raises(OverCap):
            archive.add_items("a", "c1", [_item("three", "msg_3")], _bytes(one, two))
        archive.delete_item("a", "c1", "msg_1")
    finally:
        archive.close()
    # a file an older gateway wrote: no count, which the next opening makes from its items
    with sqlite3.connect(path, isolation_level=None) as db:
        db.executescript("DROP TRIGGER conversation_item_bytes_added; DROP TRIGGER conversation_item_bytes_removed;"
                         "DROP TABLE conversation_bytes;")
        db.execute("INSERT INTO conversation_items (tenant, conversation, seq, id, item) VALUES (?, ?, ?, ?, ?)",
                   ("b", "c9", 1, "msg_b", json.dumps(one, ensure_ascii=False)))
    db.close()
    archive = _archive(path)
    try:
        assert (archive.held_bytes("a"), archive.held_bytes("b")) == (_bytes(two), _bytes(one))
    finally:
        archive.close()


def test_a_turns_items_past_the_cap_are_a_400_naming_the_conversation_and_a_deleted_one_takes_nothing():
    store = ConversationStore(_archive())
    try:
        one = _item("one", "msg_1")
        store.archive.create("a", Conversation("c1", 1, {}), [one])
        with pytest.raises(ApiError) as refused:
            asyncio.run(store.append("a", "c1", [_item("two", "msg_2")], cap=_bytes(one)))
        assert (refused.value.status, refused.value.code, refused.value.param) == (400, STORAGE_FULL_CODE,
                                                                                   "conversation")
        assert [item["id"] for item in store.archive.items("a", "c1")] == ["msg_1"]
        asyncio.run(store.append("a", "gone", [_item("two", "msg_2")], cap=_bytes(one)))   # no error: nothing left
    finally:
        store.close()


# --- the routes and the config ------------------------------------------------------------

def _config(tmp_path, **server):
    return parse_config({
        "models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                    "litellm_params": {"mock_response": "hi"}}],
        "tenants": [{"name": name, "api_key_sha256": [key_digest(key)],
                     "limits": {"paced": {"requests_per_minute": 2},
                                "stopped": {"token_budget": 0, "requests_per_minute": 100}}.get(name, {})}
                    for name, key in KEYS.items()],
        "tracing": {"enabled": False},
        "server": {"responses_db": str(tmp_path / "responses.sqlite3"), "conversation_bytes_per_tenant": 3000,
                   **server}})


def _headers(tenant: str) -> dict:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


def _create(client, tenant: str, *texts: str):
    return client.post("/v1/conversations", headers=_headers(tenant),
                       json={"items": [{"role": "user", "content": text} for text in texts]})


def _add(client, tenant: str, conversation: str, *texts: str):
    return client.post(f"/v1/conversations/{conversation}/items", headers=_headers(tenant),
                       json={"items": [{"role": "user", "content": text} for text in texts]})


def _listed(client, tenant: str, conversation: str) -> list[str]:
    listed = client.get(f"/v1/conversations/{conversation}/items?order=asc", headers=_headers(tenant))
    return [item["content"][0]["text"] for item in listed.json()["data"]]


def _assert_storage_full(answer) -> None:
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", STORAGE_FULL_CODE, "items")
    assert "3000 bytes" in error["message"] and "conversation_bytes_per_tenant" in error["message"]


def test_the_routes_refuse_past_the_cap_store_nothing_free_room_on_delete_and_keep_the_count_across_a_restart(
        tmp_path):
    with TestClient(build_app(_config(tmp_path))) as client:
        made = _create(client, "a", TEXT)
        assert made.status_code == 200, made.text
        conversation = made.json()["id"]
        assert _add(client, "a", conversation, TEXT).status_code == 200
        _assert_storage_full(_add(client, "a", conversation, TEXT))
        _assert_storage_full(_create(client, "a", TEXT))
        assert _listed(client, "a", conversation) == [TEXT, TEXT]
        other = _create(client, "b", TEXT, TEXT)   # tenant a's bytes do not limit tenant b
        assert other.status_code == 200, other.text
        assert _create(client, "a").status_code == 200   # a conversation without items adds no bytes
        first = client.get(f"/v1/conversations/{conversation}/items?order=asc", headers=_headers("a")).json()
        deleted = client.delete(f"/v1/conversations/{conversation}/items/{first['data'][0]['id']}",
                                headers=_headers("a"))
        assert deleted.status_code == 200
        assert _add(client, "a", conversation, TEXT).status_code == 200   # the room the delete freed
        _assert_storage_full(_add(client, "a", conversation, TEXT))
    with TestClient(build_app(_config(tmp_path))) as client:   # the same files, a new gateway
        _assert_storage_full(_add(client, "a", conversation, TEXT))
        assert client.delete(f"/v1/conversations/{conversation}", headers=_headers("a")).status_code == 200
        assert _add(client, "b", other.json()["id"], TEXT).status_code == 400   # b's own count, kept too
        assert _create(client, "a", TEXT, TEXT).status_code == 200


def test_adding_items_counts_against_requests_per_minute_and_a_stopped_tenant_only_within_the_cap(tmp_path):
    app = build_app(_config(tmp_path))
    with TestClient(app) as client:
        made = _create(client, "paced", "hi")   # the create counts: one of its two requests this minute
        assert made.status_code == 200 and made.headers["x-ratelimit-limit-requests"] == "2"
        conversation = made.json()["id"]
        added = _add(client, "paced", conversation, "again")
        assert added.status_code == 200 and added.headers["x-ratelimit-remaining-requests"] == "0"
        refused = _add(client, "paced", conversation, "too soon")
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
        assert "2 requests per minute" in error["message"] and int(refused.headers["retry-after"]) >= 1
        assert refused.headers["x-ratelimit-remaining-requests"] == "0"
        assert _listed(client, "paced", conversation) == ["hi", "again"]
        assert client.get(f"/v1/conversations/{conversation}", headers=_headers("paced")).status_code == 200
        # token_budget 0 stops its model requests, not its items: the byte cap bounds those
        stopped = _create(client, "stopped", TEXT)
        assert stopped.status_code == 200, stopped.text
        assert _add(client, "stopped", stopped.json()["id"], TEXT).status_code == 200
        over = _add(client, "stopped", stopped.json()["id"], TEXT)
        _assert_storage_full(over)
        assert over.headers["x-ratelimit-remaining-requests"] == "97"   # the request counted, as it says
        rejected = app.state.gateway.metrics.counters
    assert rejected[("stepahead_rejected_total", (("tenant", "paced"), ("code", "rate_limit_exceeded")))] == 1


def test_conversation_bytes_per_tenant_defaults_to_one_gib_and_must_be_positive(tmp_path):
    config = _config(tmp_path)
    assert parse_config({"models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini"}],
                         "tenants": [{"name": "a", "api_key_sha256": [key_digest("k")]}]}
                        ).conversation_bytes_per_tenant == DEFAULT_CONVERSATION_BYTES_PER_TENANT == 1024 ** 3
    assert config.conversation_bytes_per_tenant == 3000
    for bad, problem in ((0, "must be > 0"), (-1, "must be > 0"), (True, "must be an integer"),
                         ("1GiB", "must be an integer")):
        with pytest.raises(ConfigError, match=f"server.conversation_bytes_per_tenant {problem}"):
            _config(tmp_path, conversation_bytes_per_tenant=bad)


def test_a_responses_turn_whose_items_pass_the_cap_is_the_400_and_adds_nothing(tmp_path, monkeypatch):
    app = build_app(_config(tmp_path))
    with TestClient(app) as client:
        import gateway.responses_routes as routes

        models_asked, prepared_chat = [], routes.prepared_chat   # the step before a model runs

        async def preparing(state, backend, parsed, *args):
            models_asked.append(parsed.model)
            return await prepared_chat(state, backend, parsed, *args)

        monkeypatch.setattr(routes, "prepared_chat", preparing)
        made = _create(client, "a", TEXT)
        conversation = made.json()["id"]
        turn = client.post("/v1/responses", headers=_headers("a"),
                           json={"model": "mock", "input": TEXT * 2, "conversation": conversation})
        assert turn.status_code == 400, turn.text
        error = turn.json()["error"]
        assert (error["code"], error["param"]) == (STORAGE_FULL_CODE, "conversation")
        assert models_asked == []   # its input alone could not be kept: refused before any model ran
        assert _listed(client, "a", conversation) == [TEXT]
        typo = client.post("/v1/responses", headers=_headers("a"),   # QA187: the model's 404 comes first
                           json={"model": "mokc", "input": TEXT * 2, "conversation": conversation})
        assert typo.status_code == 404 and typo.json()["error"]["code"] == "model_not_found", typo.text
        over_with_its_reply = client.post("/v1/responses", headers=_headers("a"), json={
            "model": "mock", "input": "y" * 1550, "conversation": conversation})   # fits; with "hi" it does not
        assert over_with_its_reply.status_code == 400, over_with_its_reply.text
        assert over_with_its_reply.json()["error"]["param"] == "conversation" and models_asked == ["mock"]
        assert _listed(client, "a", conversation) == [TEXT]
        with client.stream("POST", "/v1/responses", headers=_headers("a"), json={
                "model": "mock", "input": "y" * 1550, "conversation": conversation, "stream": True}) as streamed:
            events = [json.loads(line[len("data: "):]) for line in streamed.iter_lines() if line.startswith("data: ")]
        assert [event["type"] for event in events][-1] == "response.failed"
        response_id = events[0]["response"]["id"]
        stored = client.get(f"/v1/responses/{response_id}", headers=_headers("a")).json()
        assert stored["status"] == "failed" and stored["error"]["code"] == STORAGE_FULL_CODE   # stored before the end
        fits = client.post("/v1/responses", headers=_headers("a"),
                           json={"model": "mock", "input": "short", "conversation": conversation})
        assert fits.status_code == 200, fits.text
        assert _listed(client, "a", conversation) == [TEXT, "short", "hi"]   # the turn: its input and its reply
