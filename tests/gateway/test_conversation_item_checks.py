"""QA224 F1: the Conversations API kept items that a Responses `input` refuses (a message
with `content: []`, a call or output with `call_id: ""`, an output with `output: []`), and
every later turn on the conversation was then a 400 naming only `conversation`. They are
now refused up front, named `items[i]...` as the turn names `input[i]...`, by the turn's
own checks (`conversation_items._check_reading`); an item kept before that is named by its
id in the turn's 400 (`check_kept_items`); the call_id message says "call", not chat's
"tool message"."""
import httpx
import pytest

from gateway.chat_checks import check_tool_messages
from gateway import conversation_items
from gateway.conversation_items import checked_items
from gateway.errors import ApiError
from gateway.responses_errors import renamed
from gateway.responses_format import ResponsesRequest, to_chat_body
from gateway.schemas import ChatCompletionRequest, validate

CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
USER = {"type": "message", "role": "user", "content": "hi"}
# (items, the bad one's index, the param its 400 names after `items[i]`, its code)
REFUSED = {
    "empty content list": ([{"type": "message", "role": "user", "content": []}], 0, ".content", "empty_array"),
    "call with empty call_id": ([{**CALL, "call_id": ""}], 0, ".call_id", "empty_string"),
    "output with empty call_id": ([CALL, {"type": "function_call_output", "call_id": "", "output": "r"}], 1,
                                  ".call_id", "empty_string"),
    "output with empty output list": ([CALL, {"type": "function_call_output", "call_id": "c1", "output": []}], 1,
                                      ".output", "empty_array"),
}
ACCEPTED = [
    {"type": "message", "role": "user", "content": ""},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ""}]},
    {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "https://e.com/a.png"}]},
    {**CALL, "name": ""}, {**CALL, "arguments": "{nope"},
    {"type": "function_call_output", "call_id": "c1", "output": ""},
    {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "r"}]},
    {"type": "reasoning", "summary": []},
]


def _error(call) -> ApiError:
    with pytest.raises(ApiError) as raised:
        call()
    return raised.value


def _turn_error(items: list[dict]) -> ApiError:
    """The 400 the same items get as a Responses `input` (the turn's checks, before any model runs)."""
    request = validate(ResponsesRequest, {"model": "tiny", "input": [*items, {"role": "user", "content": "go"}]})
    sources: list[tuple[str, ...]] = []

    def checks():
        try:
            check_tool_messages(validate(ChatCompletionRequest, to_chat_body(request, (), sources)), False)
        except ApiError as error:
            raise renamed(error, sources) from None
    return _error(checks)


@pytest.mark.parametrize("label", REFUSED)
def test_an_item_a_turn_refuses_is_refused_naming_it(label):
    items, index, field, code = REFUSED[label]
    error = _error(lambda: checked_items(items))
    assert (error.status, error.param, error.code) == (400, f"items[{index}]{field}", code)
    assert f"items[{index}]" in error.message
    assert _turn_error(items).status == 400   # the turn refuses it too
    if code == "empty_array":   # the turn's own check, its words, named for the conversation
        assert error.message == _turn_error(items).message.replace(f"input[{index}]", f"items[{index}]")


def test_items_both_accept_are_still_kept():
    kept = checked_items(ACCEPTED)
    assert len(kept) == len(ACCEPTED)


def test_the_turn_says_call_not_tool_message():
    error = _turn_error([CALL, {"type": "function_call_output", "call_id": "", "output": "r"}])
    assert error.param == "input[1]" and "'call_id'" in error.message and "tool" not in error.message
    chat = _error(lambda: validate(ChatCompletionRequest, {"model": "m", "messages": [
        {"role": "tool", "content": "r"}]}))
    assert chat.param == "messages[0]" and "'tool_call_id'" in chat.message


def test_an_item_kept_before_the_checks_is_named_by_its_id():
    good = checked_items([USER, CALL])
    bad = {"type": "message", "role": "user", "content": [], "id": "msg_bad", "status": "completed"}
    conversation_items.check_kept_items(good)
    error = _error(lambda: conversation_items.check_kept_items([*good, bad]))
    assert (error.status, error.param, error.code) == (400, "conversation", "empty_array")
    assert "'msg_bad'" in error.message and "empty array" in error.message and "Delete" in error.message
    output = {"type": "function_call_output", "call_id": "", "output": "r", "id": "fco_bad"}
    assert "'fco_bad'" in _error(lambda: conversation_items.check_kept_items([*good, output])).message


def test_create_and_add_refuse_them_over_http(gateway):
    headers = gateway.headers()
    with httpx.Client(base_url=gateway.base_url, headers=headers, timeout=30) as http:
        conversation = http.post("/v1/conversations", json={"items": [USER]}).json()["id"]
        for items, index, field, code in REFUSED.values():
            for path in ("/v1/conversations", f"/v1/conversations/{conversation}/items"):
                answer = http.post(path, json={"items": [USER, *items]})
                assert answer.status_code == 400, (path, answer.text)
                error = answer.json()["error"]
                assert (error["param"], error["code"]) == (f"items[{index + 1}]{field}", code), path
        added = http.post(f"/v1/conversations/{conversation}/items", json={"items": ACCEPTED[:4]})
        assert added.status_code == 200, added.text
        listed = http.get(f"/v1/conversations/{conversation}/items").json()["data"]
        assert len(listed) == 5   # USER and the accepted ones: nothing of a refused request was kept


@pytest.mark.parametrize("bad", [{"type": "message", "role": "user", "content": []},
                                 {"type": "function_call_output", "call_id": "", "output": "r"}])
def test_a_turn_on_a_conversation_holding_a_bad_item_kept_earlier_names_the_item(gateway, monkeypatch, bad):
    """The wiring (`responses_history.history_before`): an item kept before these checks
    (here slipped into what the store reads back) is named by its id, so it can be deleted."""
    store = gateway.app.state.gateway.conversations
    read = store.call

    async def with_a_bad_item(operation, *args):
        found = await read(operation, *args)
        return [*found, {**bad, "id": "msg_bad"}] \
            if operation == "items" else found

    with httpx.Client(base_url=gateway.base_url, headers=gateway.headers("alpha"), timeout=30) as client:
        conversation = client.post("/v1/conversations", json={"items": [USER]}).json()["id"]
        monkeypatch.setattr(store, "call", with_a_bad_item)
        for path in ("/v1/responses", "/v1/responses/input_tokens"):
            reply = client.post(path, json={"model": "tiny", "input": "hi", "conversation": conversation,
                                            "max_output_tokens": 16})
            assert reply.status_code == 400, reply.text
            error = reply.json()["error"]
            assert error["param"] == "conversation" and "'msg_bad'" in error["message"], error
