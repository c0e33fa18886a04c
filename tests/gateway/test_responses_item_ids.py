"""Item ids of the Responses API: a response's output items never take the id of one of
its own input items (a conversation keeps both, a client sends both back), and a stream
names its items as the whole response does."""
import httpx
import openai
import pytest

from gateway.backend import Finished, ToolCallDelta, Usage
from gateway.responses_format import ResponsesRequest
from gateway.responses_objects import input_items
from gateway.responses_stream import ResponsesStreamWriter, whole_response
from tests.gateway.conftest import KEYS
from tests.gateway.test_background_responses import events_of

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather for a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
# Two calls the client made before, sent without ids: input items 0 and 2 are calls, as the
# model's calls number 0 and 1 (the QA repro: input call 0 and output call 0 shared an id).
HISTORY = [{"type": "function_call", "call_id": "c0", "name": "get_weather", "arguments": "{}"},
           {"type": "function_call_output", "call_id": "c0", "output": "rain"},
           {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
           {"type": "function_call_output", "call_id": "c1", "output": "sun"},
           {"role": "user", "content": "and Rome?"}]


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["alpha"], max_retries=0)


def test_output_ids_never_take_the_shape_of_default_input_ids():
    from gateway.responses_objects import output_item_id

    request = ResponsesRequest(model="m", input=HISTORY)
    inputs = {item["id"] for item in input_items(request, "resp_abc")}
    outputs = {output_item_id("resp_abc", "message")} | {output_item_id("resp_abc", "call", i) for i in range(8)}
    assert len(inputs) == len(HISTORY) and not inputs & outputs
    collected_calls = [ToolCallDelta(0, "call_a", "get_weather", "{}"), ToolCallDelta(1, "call_b", "get_weather", "{}"),
                       Finished("tool_calls", Usage(1, 2))]
    writer = ResponsesStreamWriter("resp_abc", request, created_at=1)
    streamed = b"".join(writer.event(event) for event in collected_calls)
    whole = whole_response("resp_abc", request, writer.collected, created_at=1)
    ids = [item["id"] for item in whole["output"]]
    assert len(ids) == 2 and not set(ids) & inputs
    assert [event["item"]["id"] for event in events_of(streamed.decode())
            if event["type"] == "response.output_item.done"] == ids   # a stream names them alike


def test_a_conversation_turns_output_call_is_found_by_its_own_id(gateway, client):
    headers = gateway.headers("alpha")
    conversation = httpx.post(f"{gateway.base_url}/v1/conversations", headers=headers, json={}).json()
    reply = client.responses.create(model="tiny", input=HISTORY, tools=[WEATHER], tool_choice="required",
                                    max_output_tokens=40, temperature=0, conversation=conversation["id"])
    assert reply.output and reply.output[0].type == "function_call"
    listed = client.responses.input_items.list(reply.id, order="asc").data
    ids = [item.id for item in listed] + [item.id for item in reply.output]
    assert len(set(ids)) == len(ids) == len(HISTORY) + len(reply.output)
    for item in reply.output:
        kept = httpx.get(f"{gateway.base_url}/v1/conversations/{conversation['id']}/items/{item.id}",
                         headers=headers).json()
        assert (kept["id"], kept["type"], kept["call_id"]) == (item.id, "function_call", item.call_id)
    kept = httpx.get(f"{gateway.base_url}/v1/conversations/{conversation['id']}/items",
                     headers=headers, params={"order": "asc", "limit": 100}).json()["data"]
    assert [item["id"] for item in kept] == ids   # none renamed on the way in
    # a client that rebuilds the history from the listed input and the output sends no duplicate id
    history = [item.model_dump(exclude_none=True) for item in listed] + [
        item.model_dump(exclude_none=True) for item in reply.output] + [
        {"type": "function_call_output", "call_id": item.call_id, "output": "cloudy"} for item in reply.output]
    again = httpx.post(f"{gateway.base_url}/v1/responses", headers=headers,
                       json={"model": "tiny", "input": history, "max_output_tokens": 2})
    assert again.status_code == 200, again.text


async def test_a_streamed_call_has_the_id_of_the_stored_responses_call(gateway):
    headers = gateway.headers("alpha")
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as http:
        streamed = await http.post("/v1/responses", headers=headers, json={
            "model": "tiny", "input": HISTORY, "tools": [WEATHER], "tool_choice": "required",
            "max_output_tokens": 40, "temperature": 0, "stream": True})
        events = events_of(streamed.text)
        final = events[-1]["response"]
        stored = (await http.get(f"/v1/responses/{final['id']}", headers=headers)).json()
        listed = (await http.get(f"/v1/responses/{final['id']}/input_items", headers=headers)).json()["data"]
    added = [event["item"]["id"] for event in events if event["type"] == "response.output_item.added"]
    assert added == [item["id"] for item in final["output"]] == [item["id"] for item in stored["output"]]
    assert not set(added) & {item["id"] for item in listed}
