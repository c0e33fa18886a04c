"""The Conversations API (`/v1/conversations`) through the official client and over
HTTP, and Responses that name a `conversation`, on the tiny model."""
import asyncio

import httpx
import openai
import pytest

from gateway.conversation_items import checked_items, traced_in_conversation, turn_items
from gateway.request_metadata import checked_metadata
from gateway.errors import ApiError
from gateway.responses_format import ResponsesRequest
from tests.gateway.conftest import KEYS


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["alpha"], max_retries=0)


def _error(call) -> ApiError:
    with pytest.raises(ApiError) as raised:
        call()
    return raised.value


def test_items_are_listed_as_openai_lists_them():
    items = checked_items([{"role": "user", "content": "hi"},
                           {"type": "message", "role": "assistant", "content": "yo", "id": "msg_mine"},
                           {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                           {"type": "function_call_output", "call_id": "c1", "output": "42"},
                           {"type": "reasoning", "summary": []}])
    assert items[0]["type"] == "message" and items[0]["content"] == [{"type": "input_text", "text": "hi"}]
    assert items[0]["id"].startswith("msg_") and len(items[0]["id"]) == 52 and items[0]["status"] == "completed"
    assert items[1]["id"] == "msg_mine" and items[1]["content"] == [{"type": "output_text", "text": "yo",
                                                                      "annotations": []}]
    assert items[2]["id"].startswith("fc_") and items[3]["id"].startswith("fco_")
    assert "status" not in items[4] and items[4]["id"].startswith("rs_")
    assert checked_items(None) == []


@pytest.mark.parametrize("items, param", [
    ("hi", "items"),
    ([{"role": "user", "content": "x"}] * 21, "items"),
    (["text"], "items[0]"),
    ([{"role": "user", "content": "ok"}, {"role": "robot", "content": "x"}], "items[1].role"),
    ([{"type": "web_search_call"}], "items[0]"),
    ([{"type": "function_call", "name": "f", "arguments": "{}"}], "items[0].call_id"),
    ([{"type": "function_call_output", "call_id": "c"}], "items[0].output"),
    ([{"role": "user", "content": None}], "items[0].content"),
    ([{"role": "user", "content": "x", "id": 7}], "items[0].id"),
    ([{"role": "user", "content": "x", "id": ""}], "items[0].id"),
    ([{"role": "user", "content": "x", "id": "m" * 257}], "items[0].id"),
])
def test_a_bad_item_is_a_400_naming_it(items, param):
    error = _error(lambda: checked_items(items))
    assert error.status == 400 and error.param == param


def test_an_item_whose_id_is_null_gets_a_new_one(client):
    """`model_dump()` of an item without an id sends `"id": null`: it used to fail the store (a 500)."""
    [item] = checked_items([{"type": "message", "role": "user", "content": "hi", "id": None}])
    assert item["id"].startswith("msg_") and len(item["id"]) > 4
    conversation = client.conversations.create(items=[{"type": "message", "role": "user", "content": "hi",
                                                       "id": None}])
    added = client.conversations.items.create(conversation.id, items=[
        {"type": "message", "role": "user", "content": "more", "id": None}])
    assert added.data[0].id.startswith("msg_")
    reply = client.responses.create(model="tiny", conversation=conversation.id, max_output_tokens=2, input=[
        {"type": "message", "role": "user", "content": "again", "id": None}])
    listed = client.conversations.items.list(conversation.id, order="asc")
    assert len(listed.data) == 4 and listed.data[-1].id == reply.output[0].id   # the turn was kept
    assert all(entry.id for entry in listed.data)


@pytest.mark.parametrize("metadata, param", [
    ("x", "metadata"), ({f"k{n}": "v" for n in range(17)}, "metadata"), ({"k" * 65: "v"}, "metadata"),
    ({"k": "v" * 513}, "metadata.k"), ({"k": 1}, "metadata.k")])
def test_bad_metadata_is_a_400(metadata, param):
    assert _error(lambda: checked_metadata(metadata)).param == param


def test_a_conversation_is_exclusive_with_previous_response_id_and_names_the_traced_session():
    both = ResponsesRequest(model="m", input="x", conversation="conv_1", previous_response_id="resp_1")
    assert _error(both.conversation_id).code == "mutually_exclusive_parameters"
    assert _error(ResponsesRequest(model="m", input="x", conversation={"name": "c"}).conversation_id).param == \
        "conversation.id"
    request = ResponsesRequest(model="m", input="x", conversation={"id": "conv_1"})
    assert traced_in_conversation({"metadata": {"a": "b"}}, request) == {
        "metadata": {"a": "b", "session_id": "conv_1"}}
    assert traced_in_conversation({"metadata": {"session_id": "mine"}}, request)["metadata"]["session_id"] == "mine"
    assert traced_in_conversation({}, ResponsesRequest(model="m", input="x")) == {}
    assert [i.get("status") for i in turn_items(({"type": "message", "id": "m"},),
                                                 [{"type": "reasoning", "id": "r"},
                                                  {"type": "function_call", "id": "f", "status": "incomplete"}])] == \
        ["completed", None, "incomplete"]


def test_create_list_update_and_delete_through_the_official_client(client):
    conversation = client.conversations.create(
        items=[{"role": "user", "content": f"turn {n}"} for n in range(5)], metadata={"topic": "tests"})
    assert conversation.id.startswith("conv_") and conversation.metadata == {"topic": "tests"}
    assert client.conversations.retrieve(conversation.id) == conversation
    newest = client.conversations.items.list(conversation.id, limit=2)
    assert [item.content[0].text for item in newest.data] == ["turn 4", "turn 3"] and newest.has_more
    everything = [item.content[0].text for item in client.conversations.items.list(conversation.id, limit=2,
                                                                                   order="asc")]
    assert everything == [f"turn {n}" for n in range(5)]   # the client follows `after` page by page
    added = client.conversations.items.create(conversation.id, items=[
        {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "found"}])
    assert [item.type for item in added.data] == ["function_call", "function_call_output"]
    call = client.conversations.items.retrieve(added.data[0].id, conversation_id=conversation.id)
    assert (call.name, call.call_id, call.status) == ("lookup", "call_1", "completed")
    updated = client.conversations.update(conversation.id, metadata={"topic": "done"})
    assert updated.metadata == {"topic": "done"} and updated.created_at == conversation.created_at
    first = newest.data[-1].id
    assert client.conversations.items.delete(first, conversation_id=conversation.id).id == conversation.id
    assert len(list(client.conversations.items.list(conversation.id))) == 6
    assert client.conversations.delete(conversation.id).deleted
    with pytest.raises(openai.NotFoundError) as gone:
        client.conversations.items.list(conversation.id)
    assert gone.value.body["param"] == "conversation_id"


def test_another_tenant_gets_404s_and_bad_requests_get_400s(gateway, client):
    conversation = client.conversations.create(items=[{"role": "user", "content": "private"}])
    base = f"{gateway.base_url}/v1/conversations"
    beta = gateway.headers("beta")
    for method, path, body in (("GET", "", None), ("POST", "", {"metadata": {}}), ("DELETE", "", None),
                               ("GET", "/items", None), ("POST", "/items", {"items": []}),
                               ("GET", "/items/x", None), ("DELETE", "/items/x", None)):
        answer = httpx.request(method, f"{base}/{conversation.id}{path}", headers=beta, json=body)
        assert answer.status_code == 404 and answer.json()["error"]["param"] == "conversation_id", (method, path)
    alpha = gateway.headers("alpha")
    for method, path, body, param in (
            ("POST", "", {"metadta": {}}, "metadta"),
            ("POST", f"/{conversation.id}", {}, "metadata"),
            ("POST", f"/{conversation.id}/items", {"items": [{"role": "nobody", "content": "x"}]}, "items[0].role"),
            ("GET", f"/{conversation.id}/items?limit=0", None, "limit"),
            ("GET", f"/{conversation.id}/items?after=msg_unknown", None, "after"),
            ("GET", f"/{conversation.id}/items?include=everything", None, "include")):
        answer = httpx.request(method, f"{base}{path}", headers=alpha, json=body)
        assert answer.status_code == 400 and answer.json()["error"]["param"] == param, (method, path)
    answer = httpx.post(base, headers={**alpha, "content-type": "application/json"}, content=b"[1]")
    assert answer.status_code == 400
    assert httpx.get(f"{base}/{conversation.id}/items/missing", headers=alpha).json()["error"]["param"] == "item_id"
    assert httpx.get(f"{base}/{conversation.id}").status_code == 401
    assert [i.content[0].text for i in client.conversations.items.list(conversation.id)] == ["private"]


def test_responses_in_a_conversation_read_its_items_and_add_their_turn(client):
    conversation = client.conversations.create(items=[{"role": "user", "content": "My name is Ada."}])
    first = client.responses.create(model="tiny", input="What is my name?", conversation=conversation.id,
                                    max_output_tokens=4)
    assert first.conversation.id == conversation.id
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [(item.type, item.role) for item in items] == [("message", "user")] * 2 + [("message", "assistant")]
    assert items[2].id == first.output[0].id and items[2].content[0].text == first.output_text
    # the same prompt, written out in full, counts the same tokens: the items came first
    follow_up = client.responses.input_tokens.count(model="tiny", input="And again?", conversation=conversation.id)
    written_out = client.responses.input_tokens.count(model="tiny", input=[
        {"role": "user", "content": "My name is Ada."}, {"role": "user", "content": "What is my name?"},
        {"role": "assistant", "content": first.output_text}, {"role": "user", "content": "And again?"}])
    assert follow_up.input_tokens == written_out.input_tokens > first.usage.input_tokens
    events = list(client.responses.create(model="tiny", input="And again?", conversation={"id": conversation.id},
                                          max_output_tokens=4, store=False, stream=True))
    streamed = events[-1].response   # response.completed, or .incomplete at max_output_tokens
    assert streamed.usage.input_tokens == follow_up.input_tokens
    items = list(client.conversations.items.list(conversation.id, order="asc"))   # read at once: already there
    assert len(items) == 5 and items[-1].content[0].text == streamed.output_text
    with pytest.raises(openai.BadRequestError) as both:
        client.responses.create(model="tiny", input="x", conversation=conversation.id, previous_response_id=first.id)
    assert both.value.body["param"] == "conversation"
    with pytest.raises(openai.NotFoundError) as unknown:
        client.responses.create(model="tiny", input="x", conversation="conv_unknown")
    assert unknown.value.body["param"] == "conversation"


def test_a_tool_turn_in_a_conversation_goes_on_from_its_call(client):
    conversation = client.conversations.create()
    tool = {"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}
    first = client.responses.create(model="tiny", input="Look it up.", conversation=conversation.id, tools=[tool],
                                    tool_choice="required", max_output_tokens=16)
    [call] = [item for item in first.output if item.type == "function_call"]
    second = client.responses.create(model="tiny", conversation=conversation.id, max_output_tokens=4, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "nothing found"}])
    assert second.status in ("completed", "incomplete")
    kinds = [item.type for item in client.conversations.items.list(conversation.id, order="asc")]
    assert kinds[:3] == ["message", "function_call", "function_call_output"] and kinds[-1] == "message"


def test_the_agents_sdk_conversation_session_keeps_its_items(gateway):
    from agents.memory import OpenAIConversationsSession

    async def main():
        async with openai.AsyncOpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["alpha"],
                                      max_retries=0) as client:
            session = OpenAIConversationsSession(openai_client=client)
            await session.add_items([{"role": "user", "content": f"m{n}"} for n in range(23)])
            everything = await session.get_items()
            last_two = await session.get_items(limit=2)
            popped = await session.pop_item()
            after_pop = await session.get_items()
            await session.clear_session()
            return everything, last_two, popped, after_pop

    everything, last_two, popped, after_pop = asyncio.run(main())
    assert [item["content"][0]["text"] for item in everything] == [f"m{n}" for n in range(23)]
    assert [item["content"][0]["text"] for item in last_two] == ["m21", "m22"]
    assert popped["content"][0]["text"] == "m22" and len(after_pop) == 22


def test_a_conversation_is_traced_as_one_agent_session(client):
    conversation = client.conversations.create()
    for question in ("First?", "Second?"):
        raw = client.responses.with_raw_response.create(model="tiny", input=question, conversation=conversation.id,
                                                        max_output_tokens=2)
        assert raw.headers["x-session-id"] == conversation.id
    named = client.responses.with_raw_response.create(model="tiny", input="Third?", conversation=conversation.id,
                                                      max_output_tokens=2, extra_headers={"x-session-id": "mine"})
    assert named.headers["x-session-id"] == "mine"   # the client's own name wins


def test_a_background_response_adds_its_turn_once_done_and_a_cancelled_one_adds_nothing(client):
    import time

    conversation = client.conversations.create()
    queued = client.responses.create(model="tiny", input="In the background.", conversation=conversation.id,
                                     background=True, max_output_tokens=4)
    assert queued.conversation.id == conversation.id
    deadline_s = time.monotonic() + 60
    while (done := client.responses.retrieve(queued.id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline_s
        time.sleep(0.05)
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [item.role for item in items] == ["user", "assistant"] and items[1].id == done.output[0].id
    cancelled = client.responses.create(model="tiny", input="Never mind.", conversation=conversation.id,
                                        background=True, max_output_tokens=64)
    try:
        client.responses.cancel(cancelled.id)
    except openai.BadRequestError:   # it finished first (a fast machine): then its turn was added
        pass
    while (status := client.responses.retrieve(cancelled.id).status) in ("queued", "in_progress"):
        time.sleep(0.05)
    assert len(list(client.conversations.items.list(conversation.id))) == (2 if status == "cancelled" else 4)


async def _until_answered(http, headers, body, deadline_s=30.0):
    """POST /v1/responses until it is not refused `conversation_locked` (a hold is let go
    when the request that held it has closed, just after its client saw its end)."""
    import time

    give_up_s = time.monotonic() + deadline_s
    while (answer := await http.post("/v1/responses", headers=headers, json=body)).status_code == 400 \
            and answer.json()["error"]["code"] == "conversation_locked":
        assert time.monotonic() < give_up_s
        await asyncio.sleep(0.05)
    return answer


async def test_a_second_response_on_a_conversation_while_one_runs_is_refused_conversation_locked(gateway):
    """QA105: concurrent turns on one conversation each read it without the others and all
    appended theirs (a call answered three times: every later turn refused). As OpenAI's: a
    400 `conversation_locked` while one runs, in the foreground or the background; other
    conversations are free, and a turn refused, left by its client or cancelled lets the
    next one in. The held turns ask the fake upstream's "hang" (no answer for 60 s)."""
    from tests.gateway.test_disconnect import wait_until

    headers = gateway.headers("alpha")
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as http:
        conversation = (await http.post("/v1/conversations", headers=headers, json={})).json()["id"]
        turn = {"model": "tiny", "input": "Go on.", "conversation": conversation, "max_output_tokens": 2}
        hanging = {**turn, "model": "fake", "input": "hang"}
        is_held = lambda: ("alpha", conversation) in gateway.state.conversation_locks.held  # noqa: E731
        running = asyncio.create_task(http.post("/v1/responses", headers=headers, json=hanging))
        assert await wait_until(is_held, 10.0)
        second = await http.post("/v1/responses", headers=headers, json=turn)
        assert second.status_code == 400, second.text
        error = second.json()["error"]
        assert (error["code"], error["param"], error["type"]) == ("conversation_locked", "conversation",
                                                                  "invalid_request_error")
        other = (await http.post("/v1/conversations", headers=headers, json={})).json()["id"]
        assert (await http.post("/v1/responses", headers=headers,
                                json={**turn, "conversation": other})).status_code == 200
        running.cancel()   # its client leaves: the turn adds nothing, and lets go
        await asyncio.gather(running, return_exceptions=True)
        assert (await _until_answered(http, headers, turn)).status_code == 200
        assert (await http.post("/v1/responses", headers=headers,
                                json={**turn, "model": "no-such-model"})).status_code == 404
        background = (await http.post("/v1/responses", headers=headers, json={**hanging, "background": True})).json()
        refused = await http.post("/v1/responses", headers=headers, json=turn)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "conversation_locked"
        await http.post(f"/v1/responses/{background['id']}/cancel", headers=headers)
        assert (await _until_answered(http, headers, turn)).status_code == 200
        assert not is_held()
        items = (await http.get(f"/v1/conversations/{conversation}/items", headers=headers,
                                params={"order": "asc"})).json()["data"]
        assert [item["role"] for item in items] == ["user", "assistant", "user", "assistant"]


async def test_the_next_streamed_turn_sent_as_the_client_reads_the_end_is_not_locked_out(gateway):
    """QA128: an agent streaming turns back to back on one conversation sent each next turn
    as it read `response.completed`, and met `conversation_locked` on 14-50 % of them: the
    hold was let go only when the stream's connection closed. It goes once the turn is in
    the conversation, before the end is sent. (A race: in-process, the old code's close
    came first in every run here; over a network it did not.)"""
    headers = gateway.headers("alpha")
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as http:
        conversation = (await http.post("/v1/conversations", headers=headers, json={})).json()["id"]
        turn = {"model": "tiny", "input": "Go on.", "conversation": conversation, "max_output_tokens": 2,
                "stream": True}
        statuses = []
        for _ in range(4):
            async with http.stream("POST", "/v1/responses", headers=headers, json=turn) as reply:
                assert reply.status_code == 200
                async for line in reply.aiter_lines():
                    if line.startswith("data:") and '"type":"response.completed"' in line.replace(" ", ""):
                        break   # the end read: the next turn goes now, this stream not yet closed
                nxt = await http.post("/v1/responses", headers=headers, json={**turn, "stream": False})
                statuses.append(nxt.status_code if nxt.status_code == 200 else nxt.json()["error"]["code"])
        assert statuses == [200] * 4
