"""Responses request fields checked and echoed as QA78 finding 4 asks: `text.verbosity`
checked as chat's `verbosity`; `reasoning` echoed as sent (and still ignored); a
`tool_choice` of another type than a function is `unsupported_value`; an image in a
function_call_output names its `output`; `GET /v1/responses/{id}` checks `include` as
its input_items do."""
import httpx
import pytest

from gateway.errors import ApiError
from gateway.responses_format import ResponsesRequest, to_chat_body
from gateway.responses_objects import response_object
from gateway.schemas import validate

TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}]


def _request(**fields) -> ResponsesRequest:
    return validate(ResponsesRequest, {"model": "m", "input": "x", **fields})


def _error(**fields) -> ApiError:
    with pytest.raises(ApiError) as raised:
        to_chat_body(_request(**fields))
    return raised.value


@pytest.mark.parametrize("verbosity", ["ultra", {"a": [1]}, 1, ""])
def test_a_text_verbosity_chat_does_not_know_is_a_400_naming_it(verbosity):
    error = _error(text={"verbosity": verbosity})
    assert (error.status, error.code, error.param) == (400, "invalid_value", "text.verbosity")
    assert "'low', 'medium' or 'high'" in error.message


@pytest.mark.parametrize("verbosity", ["low", "medium", "high", None])
def test_a_text_verbosity_chat_knows_is_accepted(verbosity):
    assert "verbosity" not in to_chat_body(_request(text={"verbosity": verbosity}))   # and ignored, as in chat


def test_reasoning_is_echoed_as_the_request_sent_it_and_not_passed_on():
    request = _request(reasoning={"effort": "high", "summary": "auto"})
    assert response_object("resp_1", request)["reasoning"] == {"effort": "high", "summary": "auto"}
    assert response_object("resp_1", _request(reasoning={"effort": "low"}))["reasoning"] == {
        "effort": "low", "summary": None}
    assert response_object("resp_1", _request())["reasoning"] == {"effort": None, "summary": None}
    assert not any("reason" in key for key in to_chat_body(request))


def test_a_reasoning_effort_that_is_not_a_string_is_a_400_naming_it():
    error = _error(reasoning={"effort": 5})
    assert (error.status, error.code, error.param) == (400, "invalid_type", "reasoning.effort")


@pytest.mark.parametrize("choice", [
    {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "f"}]},
    {"type": "file_search"}, {"type": "web_search_preview"}, {"type": "custom", "name": "f"}])
def test_a_tool_choice_of_another_type_than_function_is_unsupported(choice):
    error = _error(tools=TOOLS, tool_choice=choice)
    assert (error.status, error.code, error.param) == (400, "unsupported_value", "tool_choice")
    assert repr(choice["type"]) in error.message


def test_a_named_function_tool_choice_still_becomes_chats():
    assert to_chat_body(_request(tools=TOOLS, tool_choice={"type": "function", "name": "f"}))["tool_choice"] == {
        "type": "function", "function": {"name": "f"}}


def test_an_image_in_a_function_call_output_names_its_output(gateway):
    items = [{"role": "user", "content": "q"}, {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1",
              "output": [{"type": "input_image", "image_url": "http://x/y.png"}]}]
    reply = httpx.post(f"{gateway.base_url}/v1/responses", headers=gateway.headers("alpha"), timeout=60,
                       json={"model": "tiny", "tools": TOOLS, "input": items, "max_output_tokens": 2})
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["param"] == "input[2].output", error
    assert "'input_image'" in error["message"]


def test_get_of_a_response_checks_include_as_its_input_items_do(gateway):
    headers = gateway.headers("alpha")
    created = httpx.post(f"{gateway.base_url}/v1/responses", headers=headers, timeout=60,
                         json={"model": "tiny", "input": "x", "max_output_tokens": 1}).json()
    url = f"{gateway.base_url}/v1/responses/{created['id']}"
    for path in ("", "/input_items"):
        bogus = httpx.get(f"{url}{path}", headers=headers, params={"include[]": "bogus"})
        assert bogus.status_code == 400 and bogus.json()["error"]["param"] == "include[]"
        known = httpx.get(f"{url}{path}", headers=headers, params={"include[]": "message.output_text.logprobs"})
        assert known.status_code == 200


def test_a_call_left_unanswered_at_the_end_of_input_speaks_of_no_next_turn():
    """The message is `chat_checks`' (its end-of-messages wording), named as this API names things."""
    from gateway.chat_checks import check_tool_messages
    from gateway.responses_errors import renamed
    from gateway.schemas import ChatCompletionRequest

    request = _request(tools=TOOLS, input=[{"role": "user", "content": "q"}, {"type": "function_call",
                                                                             "call_id": "c1", "name": "f",
                                                                             "arguments": "{}"}])
    sources: list[tuple[str, ...]] = []
    chat = validate(ChatCompletionRequest, to_chat_body(request, (), sources))
    with pytest.raises(ApiError) as raised:
        check_tool_messages(chat)
    error = renamed(raised.value, sources)
    assert error.param == "input[1].call_id" and "'c1'" in error.message and "function_call_output" in error.message
    assert "next turn" not in error.message and "messages[" not in error.message
