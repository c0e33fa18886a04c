"""QA154 finding 1: while a response ran on a conversation, `POST /v1/conversations/{id}/items`
and `DELETE /v1/conversations/{id}/items/{item_id}` went through. The turn's items are
appended when it ends, so an item added meanwhile landed between a `function_call` and
the output the turn sent for it (and the model never saw it): every later turn was
refused. They are now a 400 `conversation_locked`, as a second `POST /v1/responses` is;
what changes no item (reading, metadata, deleting the conversation) is not held back.
The held turns ask the fake upstream's "slow" (3 s before its answer), after answering a call."""
import asyncio

import httpx
import pytest

from gateway.conversation_locks import ConversationLocks
from gateway.errors import ApiError
from tests.gateway.test_disconnect import wait_until

CALL = {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"}


def test_items_are_refused_only_on_a_held_conversation_of_that_tenant():
    locks = ConversationLocks()
    hold = locks.take("alpha", "conv_1")
    with pytest.raises(ApiError) as raised:
        locks.check_items_free("alpha", "conv_1")
    error = raised.value
    assert (error.status, error.code, error.param) == (400, "conversation_locked", "conversation_id")
    assert "conv_1" in error.message
    locks.check_items_free("beta", "conv_1")   # another tenant's id: its own 404 follows, never `locked`
    locks.check_items_free("alpha", "conv_2")
    hold.release()
    locks.check_items_free("alpha", "conv_1")


async def _conversation(http, headers, items) -> tuple[str, list[dict]]:
    made = await http.post("/v1/conversations", headers=headers, json={"items": items})
    assert made.status_code == 200, made.text
    conversation = made.json()["id"]
    listed = await http.get(f"/v1/conversations/{conversation}/items", headers=headers, params={"order": "asc"})
    return conversation, listed.json()["data"]


def _turn_on(conversation: str) -> dict:
    """A turn answering CALL, then "slow": the fake upstream answers it after 3 s."""
    return {"model": "fake", "conversation": conversation, "max_output_tokens": 8,
            "input": [{"type": "function_call_output", "call_id": "call_1", "output": "42"},
                      {"role": "user", "content": "slow"}]}


def _is_locked(answer: httpx.Response) -> bool:
    if answer.status_code != 400:
        return False
    error = answer.json()["error"]
    return (error["code"], error["param"], error["type"]) == ("conversation_locked", "conversation_id",
                                                              "invalid_request_error")


async def test_items_cannot_be_added_or_deleted_while_a_turn_runs_and_the_conversation_stays_usable(gateway):
    headers = gateway.headers("alpha")
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as http:
        conversation, items = await _conversation(http, headers, [{"role": "user", "content": "Look it up."}, CALL])
        url = f"/v1/conversations/{conversation}"
        is_held = lambda: ("alpha", conversation) in gateway.state.conversation_locks.held  # noqa: E731
        running = asyncio.create_task(http.post("/v1/responses", headers=headers, json=_turn_on(conversation)))
        assert await wait_until(is_held, 10.0)
        added = await http.post(f"{url}/items", headers=headers,
                                json={"items": [{"role": "user", "content": "Posted while the agent works."}]})
        assert _is_locked(added), added.text
        deleted = await http.delete(f"{url}/items/{items[1]['id']}", headers=headers)   # the call
        assert _is_locked(deleted), deleted.text
        # reading and metadata change no item: answered as ever; another tenant still gets 404s
        assert (await http.get(f"{url}/items", headers=headers)).status_code == 200
        assert (await http.get(f"{url}/items/{items[1]['id']}", headers=headers)).status_code == 200
        assert (await http.get(url, headers=headers)).status_code == 200
        updated = await http.post(url, headers=headers, json={"metadata": {"topic": "weather"}})
        assert updated.status_code == 200 and updated.json()["metadata"] == {"topic": "weather"}
        other = gateway.headers("beta")
        assert (await http.post(f"{url}/items", headers=other,
                                json={"items": [{"role": "user", "content": "x"}]})).status_code == 404
        assert (await http.delete(f"{url}/items/{items[1]['id']}", headers=other)).status_code == 404
        assert is_held()   # all the above ran while the turn held the conversation
        turn = await running
        assert turn.status_code == 200, turn.text
        assert not is_held()
        added = await http.post(f"{url}/items", headers=headers,
                                json={"items": [{"role": "user", "content": "Posted after the turn."}]})
        assert added.status_code == 200, added.text
        kept = (await http.get(f"{url}/items", headers=headers, params={"order": "asc"})).json()["data"]
        assert [item["type"] for item in kept] == ["message", "function_call", "function_call_output", "message",
                                                   "message", "message"]
        assert [item["role"] for item in kept[3:]] == ["user", "assistant", "user"]
        assert (await http.get(url, headers=headers)).json()["metadata"] == {"topic": "weather"}
        nxt = await http.post("/v1/responses", headers=headers,
                              json={"model": "tiny", "conversation": conversation, "input": "Go on.",
                                    "max_output_tokens": 2})
        assert nxt.status_code == 200, nxt.text   # the conversation still makes a conversation


async def test_a_conversation_deleted_while_a_turn_runs_stays_deleted(gateway):
    """Deleting the conversation is not held back: nothing of it is left for a later turn
    to refuse; the running turn ends as ever, and its items go nowhere."""
    headers = gateway.headers("alpha")
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as http:
        conversation, _ = await _conversation(http, headers, [{"role": "user", "content": "Look it up."}, CALL])
        is_held = lambda: ("alpha", conversation) in gateway.state.conversation_locks.held  # noqa: E731
        running = asyncio.create_task(http.post("/v1/responses", headers=headers, json=_turn_on(conversation)))
        assert await wait_until(is_held, 10.0)
        deleted = await http.delete(f"/v1/conversations/{conversation}", headers=headers)
        assert deleted.status_code == 200 and deleted.json()["deleted"] is True
        turn = await running
        assert turn.status_code == 200, turn.text
        assert not is_held()
        assert (await http.get(f"/v1/conversations/{conversation}", headers=headers)).status_code == 404
        assert (await http.get(f"/v1/conversations/{conversation}/items", headers=headers)).status_code == 404
