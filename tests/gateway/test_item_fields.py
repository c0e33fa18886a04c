"""Conversation items and Responses `input` items take the fields OpenAI's item types
declare, with the values those types take; any other field or value is a 400 naming it
(QA105 findings 2 and 3)."""
import httpx
import openai
import pytest

from gateway.conversation_items import checked_items
from gateway.errors import ApiError
from gateway.item_fields import check_item_fields
from gateway.responses_format import ResponsesRequest, to_chat_body
from tests.gateway.conftest import KEYS

# every field OpenAI's types declare for the item types the gateway reads, as the official
# and Agents SDKs may send them back
FULL_ITEMS = [
    {"type": "message", "id": "msg_u", "role": "user", "status": "completed",
     "content": [{"type": "input_text", "text": "x", "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "30m"}},
                 {"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "auto", "file_id": None,
                  "prompt_cache_breakpoint": None}]},
    {"type": "message", "id": "msg_a", "role": "assistant", "status": "incomplete", "phase": "final_answer",
     "content": [{"type": "output_text", "text": "y", "annotations": [], "logprobs": []},
                 {"type": "refusal", "refusal": "no"}]},
    {"role": "developer", "content": "be brief", "phase": None, "status": None},
    {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}",
     "status": "in_progress", "caller": {"type": "direct"}, "namespace": "ns", "async": False,
     "created_by": "resp_1"},
    {"type": "function_call_output", "id": "fco_1", "call_id": "c1", "status": "completed", "name": "f",
     "namespace": "ns", "caller": None, "created_by": "resp_1",
     "output": [{"type": "input_text", "text": "42", "prompt_cache_breakpoint": None}]},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}],
     "content": [{"type": "reasoning_text", "text": "t"}], "encrypted_content": None, "status": "completed"},
]

# (item, the param a 400 names, its code)
BAD_ITEMS = [
    ({"role": "user", "content": "x", "status": 7}, "[0].status", "invalid_value"),
    ({"role": "user", "content": "x", "status": "bogus"}, "[0].status", "invalid_value"),
    ({"role": "user", "content": "x", "foo": {"big": "junk"}}, "[0].foo", "unknown_parameter"),
    ({"role": "assistant", "content": "x", "phase": "draft"}, "[0].phase", "invalid_value"),
    ({"type": "reasoning"}, "[0].summary", "missing_required_parameter"),
    ({"type": "reasoning", "summary": "notalist"}, "[0].summary", "invalid_type"),
    ({"type": "reasoning", "summary": [], "encrypted_content": 5}, "[0].encrypted_content", "invalid_type"),
    ({"type": "reasoning", "summary": [{"type": "summary_text", "text": 1}]}, "[0].summary[0]", "invalid_value"),
    ({"type": "reasoning", "summary": [], "content": [{"type": "summary_text", "text": "t"}]}, "[0].content[0]",
     "invalid_value"),
    ({"type": "reasoning", "summary": [{"type": "summary_text", "text": "s", "x": 1}]}, "[0].summary[0].x",
     "unknown_parameter"),
    ({"role": "user", "content": [{"type": "input_text", "text": "x"}, {"type": "input_text", "text": "x", "zzz": 1}]},
     "[0].content[1].zzz", "unknown_parameter"),
    ({"role": "assistant", "content": [{"type": "output_text", "text": "x", "annotations": "none"}]},
     "[0].content[0].annotations", "invalid_type"),
    ({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "extra": 1}, "[0].extra",
     "unknown_parameter"),
    ({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "status": "done"}, "[0].status",
     "invalid_value"),
    ({"type": "function_call_output", "call_id": "c", "output": [{"type": "input_text", "text": "r", "q": 0}]},
     "[0].output[0].q", "unknown_parameter"),
    ({"type": "function_call_output", "call_id": "c", "output": "r", "namespace": 3}, "[0].namespace",
     "invalid_type"),
]


def _error(call) -> ApiError:
    with pytest.raises(ApiError) as raised:
        call()
    return raised.value


def test_every_field_openais_item_types_declare_is_kept():
    items = checked_items(FULL_ITEMS)
    assert [item["id"] for item in items][:2] == ["msg_u", "msg_a"] and items[1]["phase"] == "final_answer"
    assert items[2]["status"] == "completed" and items[3]["caller"] == {"type": "direct"}
    assert items[5]["summary"] == [{"type": "summary_text", "text": "s"}]
    to_chat_body(ResponsesRequest(model="m", input=FULL_ITEMS[2:5] + [{"role": "user", "content": "go"}]))


@pytest.mark.parametrize("item, param, code", BAD_ITEMS)
def test_a_field_or_value_its_type_does_not_take_is_a_400_naming_it(item, param, code):
    error = _error(lambda: checked_items([item]))
    assert (error.status, error.param, error.code) == (400, f"items{param}", code)
    error = _error(lambda: to_chat_body(ResponsesRequest(model="m", input=[item])))
    assert (error.status, error.param, error.code) == (400, f"input{param}", code)


def test_a_conversation_object_with_another_key_than_its_id_is_a_400():
    error = _error(ResponsesRequest(model="m", input="x", conversation={"id": "conv_1", "foo": 1}).conversation_id)
    assert (error.status, error.param, error.code) == (400, "conversation.foo", "unknown_parameter")
    assert ResponsesRequest(model="m", input="x", conversation={"id": "conv_1"}).conversation_id() == "conv_1"


def test_adding_null_items_is_a_400_and_bad_items_are_not_kept(gateway):
    headers = {"Authorization": f"Bearer {KEYS['alpha']}"}
    with httpx.Client(base_url=f"{gateway.base_url}/v1", headers=headers, timeout=30) as http:
        conversation = http.post("/conversations", json={}).json()["id"]
        null = http.post(f"/conversations/{conversation}/items", json={"items": None})
        assert null.status_code == 400 and null.json()["error"]["param"] == "items"
        bad = http.post(f"/conversations/{conversation}/items",
                        json={"items": [{"role": "user", "content": "x"}, {"role": "user", "content": "x", "foo": 1}]})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "items[1].foo"
        bad = http.post("/responses", json={"model": "tiny", "input": "x", "conversation": {"id": conversation,
                                                                                           "foo": 1}})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "conversation.foo"
        assert http.get(f"/conversations/{conversation}/items").json()["data"] == []


def test_listed_items_and_a_responses_output_go_back_as_items(gateway):
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["alpha"], max_retries=0)
    conversation = client.conversations.create(items=FULL_ITEMS[:3])
    listed = client.conversations.items.list(conversation.id, order="asc").data
    again = client.conversations.create(items=[item.model_dump(exclude_unset=True) for item in listed])
    assert len(client.conversations.items.list(again.id).data) == 3
    response = client.responses.create(model="tiny", input="hi", max_output_tokens=2,
                                       include=["message.output_text.logprobs"])
    client.responses.create(model="tiny", max_output_tokens=2, input=[
        {"role": "user", "content": "hi"}, *[item.model_dump(exclude_unset=True) for item in response.output],
        {"role": "user", "content": "more"}])


@pytest.mark.parametrize("item, param", [
    ({"type": {"x": 1}, "role": "user", "content": "x"}, "[0]"),
    ({"role": "user", "content": [{"type": ["input_text"], "text": "x"}]}, "[0].content[0]"),
    ({"type": "reasoning", "summary": [], "content": "t"}, "[0].content"),
])
def test_an_item_or_part_type_of_another_json_type_is_a_400_not_a_server_error(item, param):
    assert _error(lambda: checked_items([item])).param == f"items{param}"
    assert _error(lambda: to_chat_body(ResponsesRequest(model="m", input=[item]))).param == f"input{param}"


def test_items_the_python_sdk_dumps_by_attribute_name_are_taken():
    """QA112: the SDK's `model_dump()` names a function call's `async` by its attribute,
    `async_`; the Agents SDK's conversation session sends items back so, and every later
    run of the session was a 400 naming `input[1].async_`."""
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    call = ResponseFunctionToolCall(type="function_call", call_id="c1", name="f", arguments="{}", id="fc_1",
                                    status="completed")
    message = ResponseOutputMessage(type="message", id="msg_1", role="assistant", status="completed",
                                    content=[ResponseOutputText(type="output_text", text="hi", annotations=[])])
    for dumped in (call.model_dump(), call.model_dump(by_alias=True), message.model_dump()):
        check_item_fields(dumped, "input[1]")
    assert "async_" in call.model_dump()   # the SDK's attribute name, as sent back
    with pytest.raises(ApiError) as refused:
        check_item_fields({**call.model_dump(), "async_": "yes"}, "input[1]")
    assert (refused.value.param, refused.value.code) == ("input[1].async_", "invalid_type")


def test_a_field_sent_under_the_sdks_attribute_name_is_kept_under_its_own():
    """QA117: `async_` was taken but stored and listed back as `async_`, which the SDK
    reads as no `async` at all; both given and different was stored as such."""
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "async_": True}
    [listed] = checked_items([call])
    assert listed["async"] is True and "async_" not in listed
    [listed] = checked_items([{**call, "async_": None, "async": False}])
    assert listed["async"] is False and "async_" not in listed
    error = _error(lambda: checked_items([{**call, "async": False}]))
    assert (error.param, error.code) == ("items[0].async_", "invalid_value")
