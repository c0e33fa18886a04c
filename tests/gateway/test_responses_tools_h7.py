"""Tool definitions and tool errors as the Responses API and chat completions name them
(QA67 M1, L1, L2): a named `tool_choice` is checked in the Responses shape, tool lists
and names OpenAI refuses are 400s naming the parameter, and a call of the stored
conversation left unanswered names a parameter that exists."""
import httpx
import pytest

from gateway.errors import ApiError
from gateway.responses_errors import renamed
from gateway.responses_format import ResponsesRequest, to_chat_body
from gateway.schemas import MAX_TOOLS, ChatCompletionRequest, validate

WEATHER = {"type": "function", "name": "get_weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
CHAT_WEATHER = {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}
USER = [{"role": "user", "content": "x"}]


def post(gateway, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{gateway.base_url}/v1/{path}", headers=gateway.headers("alpha"), json={"model": "tiny", **body},
                      timeout=120)


def error_of(reply: httpx.Response) -> dict:
    assert reply.status_code == 400, reply.text
    return reply.json()["error"]


@pytest.mark.parametrize("choice, code, says", [
    ({"type": "function"}, "missing_required_parameter", "Missing required parameter: 'tool_choice.name'"),
    ({"type": "function", "name": 5}, "invalid_type", "expected a string, but got int"),
    ({"type": "function", "function": {"name": "get_weather"}}, "missing_required_parameter",
     "chat completions'"),
])
def test_a_wrong_named_tool_choice_names_the_responses_parameter(gateway, choice, code, says):
    with pytest.raises(ApiError) as raised:
        to_chat_body(ResponsesRequest(model="m", input="x", tools=[WEATHER], tool_choice=choice))
    assert (raised.value.param, raised.value.code) == ("tool_choice.name", code)
    error = error_of(post(gateway, "responses", {"input": "hi", "tools": [WEATHER], "tool_choice": choice}))
    assert (error["param"], error["code"]) == ("tool_choice.name", code)
    assert says in error["message"] and "tool_choice.function" not in error["message"]
    assert '{"type": "function", "name": "..."}' in error["message"] or code == "invalid_type"


def test_a_named_tool_choice_in_the_responses_shape_still_runs_as_chats():
    body = to_chat_body(ResponsesRequest(model="m", input="x", tools=[WEATHER],
                                         tool_choice={"type": "function", "name": "get_weather"}))
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    for choice in ("auto", "required", "none"):
        assert to_chat_body(ResponsesRequest(model="m", input="x", tools=[WEATHER], tool_choice=choice))[
            "tool_choice"] == choice


def test_a_chat_tool_choice_error_is_named_as_the_responses_api_names_it():
    error = renamed(ApiError(400, "Invalid request at 'tool_choice.function.name': Input should be a valid string",
                             param="tool_choice.function.name"))
    assert error.param == "tool_choice.name" and "'tool_choice.name'" in error.message


@pytest.mark.parametrize("tools, param, code", [
    ([{"type": "function", "function": {"name": "ns.get_weather"}}], "tools[0].function.name", "invalid_value"),
    ([], "tools", "empty_array"),
    ([{"type": "function", "function": {"name": f"t{i}"}} for i in range(MAX_TOOLS + 1)], "tools",
     "array_above_max_length"),
])
def test_chat_tool_lists_and_names_openai_refuses_are_400s(gateway, tools, param, code):
    error = error_of(post(gateway, "chat/completions", {"messages": USER, "tools": tools, "max_tokens": 1}))
    assert (error["param"], error["code"]) == (param, code)


def test_the_most_tools_openai_takes_are_taken():
    tools = [{"type": "function", "function": {"name": f"t-{i}_x"}} for i in range(MAX_TOOLS)]
    assert len(validate(ChatCompletionRequest, {"model": "m", "messages": USER, "tools": tools}).tools) == MAX_TOOLS


def test_responses_tool_names_and_counts_openai_refuses_are_400s_naming_responses_params(gateway):
    dotted = error_of(post(gateway, "responses", {"input": "x", "tools": [{**WEATHER, "name": "ns.get_weather"}]}))
    assert dotted["param"] == "tools[0].name" and "function" not in dotted["param"]
    many = [{"type": "function", "name": f"t{i}"} for i in range(MAX_TOOLS + 1)]
    too_many = error_of(post(gateway, "responses", {"input": "x", "tools": many}))
    assert (too_many["param"], too_many["code"]) == ("tools", "array_above_max_length")


def test_responses_take_an_empty_tool_list_as_the_agents_sdk_sends_it(gateway):
    reply = post(gateway, "responses", {"input": "x", "tools": [], "max_output_tokens": 1})
    assert reply.status_code == 200, reply.text


def test_an_unanswered_call_of_the_conversation_names_input_and_says_where_the_call_came_from(gateway):
    headers = gateway.headers("alpha")
    conversation = httpx.post(f"{gateway.base_url}/v1/conversations", headers=headers, json={"items": [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "call_a", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call", "call_id": "call_b", "name": "get_weather", "arguments": "{}"}]}).json()
    for answered in ([], [{"type": "function_call_output", "call_id": "call_a", "output": "sunny"}]):
        error = error_of(post(gateway, "responses", {"conversation": conversation["id"], "tools": [WEATHER],
                                                     "input": [*answered, {"role": "user", "content": "hello"}]}))
        assert error["param"] == "input", error   # the first call, and the second (was plain 'conversation')
        assert "a function_call of the conversation" in error["message"]
        assert ("'call_b'" if answered else "'call_a'") in error["message"]
        assert "call_id" in error["message"] and "messages[" not in error["message"]


def test_an_unanswered_call_of_the_previous_response_names_input(gateway):
    first = post(gateway, "responses", {"input": "weather?", "tools": [WEATHER], "tool_choice": "required",
                                        "max_output_tokens": 12}).json()
    assert first["output"][-1]["type"] == "function_call"
    error = error_of(post(gateway, "responses", {"previous_response_id": first["id"], "input": "hello again",
                                                 "tools": [WEATHER]}))
    assert error["param"] == "input"
    assert "the response 'previous_response_id' names" in error["message"]
    assert first["output"][-1]["call_id"] in error["message"]
