"""`chat_checks.check_tool_messages`: a call id waits for one answer at a time and is
answered once (OpenAI: "Duplicate function_call_output for call_id"), and the errors name
the chat param, renamed for Responses requests."""
import httpx
import pytest

from gateway.chat_checks import check_chat_request, check_tool_messages
from gateway.errors import ApiError
from gateway.schema_checks import SchemaChecker
from gateway.schemas import ChatCompletionRequest, validate


def _call(call_id: str, name: str = "f") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def _check(messages: list[dict]) -> None:
    check_tool_messages(validate(ChatCompletionRequest, {"model": "m", "messages": messages}))


def _error(messages: list[dict]) -> ApiError:
    with pytest.raises(ApiError) as raised:
        _check(messages)
    return raised.value


USER = {"role": "user", "content": "x"}


def test_a_second_answer_to_one_call_is_a_400_naming_the_second_tool_message():
    error = _error([USER, {"role": "assistant", "tool_calls": [_call("c1")]},
                    {"role": "tool", "tool_call_id": "c1", "content": "1"},
                    {"role": "tool", "tool_call_id": "c1", "content": "2"}])
    assert (error.status, error.param) == (400, "messages[3].tool_call_id")
    assert "'c1' a second time" in error.message


def test_two_pending_calls_with_one_id_are_a_400_naming_the_second_call():
    error = _error([USER, {"role": "assistant", "tool_calls": [_call("c1", "f"), _call("c1", "g")]},
                    {"role": "tool", "tool_call_id": "c1", "content": "1"}])
    assert (error.status, error.param) == (400, "messages[1].tool_calls[1].id")
    assert "still waiting for its answer" in error.message


def test_an_id_used_again_in_a_later_turn_after_its_answer_is_a_new_call():
    # frameworks that number calls per turn ("call_0" every turn) send such histories
    _check([USER, {"role": "assistant", "tool_calls": [_call("call_0")]},
            {"role": "tool", "tool_call_id": "call_0", "content": "1"},
            {"role": "assistant", "tool_calls": [_call("call_0")]},
            {"role": "tool", "tool_call_id": "call_0", "content": "2"}])


def test_a_call_left_unanswered_at_the_end_is_not_said_to_wait_for_a_next_turn():
    error = _error([USER, {"role": "assistant", "tool_calls": [_call("c1")]}])
    assert error.param == "messages[1].tool_calls[0].id"
    assert "by the end of the conversation" in error.message and "next turn" not in error.message


def test_a_duplicate_function_call_output_is_a_400_naming_its_item_on_responses(gateway):
    body = {"model": "tiny", "max_output_tokens": 4, "input": [
        USER, {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "1"},
        {"type": "function_call_output", "call_id": "c1", "output": "2"}]}
    reply = httpx.post(f"{gateway.base_url}/v1/responses", headers=gateway.headers("alpha"), json=body, timeout=60)
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["param"] == "input[3].call_id", error
    assert "function_call_output at input[3]" in error["message"] and "a second time" in error["message"], error


@pytest.mark.parametrize("field, value", [
    ("functions", [{"name": "f", "parameters": {"type": "object"}}]),
    ("function_call", "auto"),
])
def test_legacy_function_calling_is_refused_for_every_model(field, value):
    # QA82: an upstream model's function_call reply was answered as an empty message with no call
    request = validate(ChatCompletionRequest, {"model": "any", "messages": [USER], field: value})
    with pytest.raises(ApiError) as raised:
        check_chat_request(request, "alpha", SchemaChecker())
    assert (raised.value.code, raised.value.param) == ("unsupported_parameter", field)
    check_chat_request(validate(ChatCompletionRequest, {"model": "any", "messages": [USER], field: None}),
                       "alpha", SchemaChecker())   # null: SDKs send it so


def test_content_given_as_an_empty_list_of_parts_is_an_empty_array():
    error = _error([{"role": "user", "content": []}])
    assert (error.code, error.param) == ("empty_array", "messages[0].content")
