"""Checks of a `POST /v1/responses` request's fields, and the errors they give: strict
types as chat's, `text.format`'s required `schema`, content and output errors naming the
field they are about, and a completion budget over the context named as such."""
import re

import httpx
import pytest

from gateway.errors import ApiError, context_length_exceeded
from gateway.local_sampling import completion_budget
from gateway.responses_format import ResponsesRequest, to_chat_body
from gateway.responses_input import input_messages
from gateway.schemas import ChatCompletionRequest, validate


def _error(call) -> ApiError:
    with pytest.raises(ApiError) as raised:
        call()
    return raised.value


def _post(gateway, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{gateway.base_url}{path}", headers=gateway.headers("alpha"), json=body, timeout=60)


# text.format json_schema: `schema` is required here, optional in chat's response_format

def test_a_json_schema_text_format_without_its_schema_is_a_missing_parameter():
    for fmt in ({"type": "json_schema", "name": "n"}, {"type": "json_schema", "name": "n", "schema": None}):
        error = _error(lambda: to_chat_body(ResponsesRequest(model="m", input="x", text={"format": fmt})))
        assert (error.status, error.code, error.param) == (400, "missing_required_parameter", "text.format.schema")
        assert error.message == "Missing required parameter: 'text.format.schema'."
    body = to_chat_body(ResponsesRequest(model="m", input="x", text={"format": {"type": "json_object"}}))
    assert body["response_format"] == {"type": "json_object"}


def test_chats_json_schema_response_format_may_still_leave_out_its_schema():
    chat = validate(ChatCompletionRequest, {"model": "m", "messages": [{"role": "user", "content": "x"}],
                                            "response_format": {"type": "json_schema", "json_schema": {"name": "n"}}})
    assert chat.response_format is not None


def test_a_json_schema_text_format_without_its_schema_is_refused_over_http(gateway):
    reply = _post(gateway, "/v1/responses", {"model": "tiny", "input": "x",
                                             "text": {"format": {"type": "json_schema", "name": "n"}}})
    error = reply.json()["error"]
    assert reply.status_code == 400
    assert (error["code"], error["param"], error["type"]) == ("missing_required_parameter", "text.format.schema",
                                                             "invalid_request_error")


# strict field types, as chat's

@pytest.mark.parametrize("field,value", [
    ("max_output_tokens", "5"), ("max_output_tokens", 5.0), ("max_output_tokens", True),
    ("temperature", "0.5"), ("top_p", "1"), ("top_logprobs", "2"), ("max_tool_calls", "3"),
    ("instructions", 5), ("metadata", {"k": 1})])
def test_a_field_of_the_wrong_json_type_is_a_400_naming_it(field, value):
    error = _error(lambda: validate(ResponsesRequest, {"model": "m", "input": "x", field: value}))
    assert (error.status, error.code, error.type) == (400, "invalid_value", "invalid_request_error")
    assert error.param.startswith(field) and f"'{error.param}'" in error.message


@pytest.mark.parametrize("extra", [
    {"temperature": 1, "top_p": 1}, {"temperature": 0.5, "top_p": 0.9, "max_output_tokens": 5},
    {"input": [{"role": "user", "content": [{"type": "input_text", "text": "x"}]}]},
    {"conversation": "conv_1"}, {"conversation": {"id": "conv_1"}}, {"metadata": {"k": "v"}},
    {"instructions": None, "tools": None, "tool_choice": None, "parallel_tool_calls": None, "text": None,
     "max_output_tokens": None, "temperature": None, "top_p": None, "stream": None, "store": None,
     "background": None, "previous_response_id": None, "conversation": None, "metadata": None, "user": None,
     "truncation": None, "include": None, "top_logprobs": None, "service_tier": None, "prompt_cache_key": None,
     "safety_identifier": None, "max_tool_calls": None},
    {"tool_choice": "auto", "tools": [{"type": "function", "name": "f"}], "parallel_tool_calls": False,
     "truncation": "auto", "include": ["message.output_text.logprobs"], "top_logprobs": 0, "service_tier": "flex",
     "reasoning": {"effort": "low"}, "text": {"format": {"type": "text"}}}])
def test_requests_valid_before_stay_valid(extra):
    request = validate(ResponsesRequest, {"model": "m", "input": "x", **extra})
    if "temperature" in extra and extra["temperature"] is not None:
        assert request.temperature == float(extra["temperature"])


@pytest.mark.parametrize("field,value", [("max_output_tokens", "5"), ("temperature", "0.5")])
def test_a_number_sent_as_a_string_is_refused_over_http(gateway, field, value):
    reply = _post(gateway, "/v1/responses", {"model": "tiny", "input": "x", field: value})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == field


# content and function_call_output errors name the field they are about

def test_a_text_part_whose_text_is_not_a_string_names_its_text():
    error = _error(lambda: input_messages([{"role": "user", "content": [{"type": "input_text", "text": 5}]}]))
    assert error.param == "input[0].content[0].text"
    assert "'text'" in error.message and "not supported" not in error.message
    error = _error(lambda: input_messages([{"role": "assistant", "content": [
        {"type": "output_text", "text": "a"}, {"type": "refusal", "refusal": None}]}]))
    assert error.param == "input[0].content[1].refusal" and "'refusal'" in error.message
    error = _error(lambda: input_messages([{"role": "user", "content": [{"type": "input_image"}]}]))
    assert error.param == "input[0].content[0].image_url" and "'image_url'" in error.message
    for part in ({"type": "input_audio"}, {"type": "refusal", "refusal": "no"}, {"type": {"type": "text"}}, "text"):
        error = _error(lambda: input_messages([{"role": "user", "content": [part]}]))
        assert error.param == "input[0].content[0]" and "not supported" in error.message
    error = _error(lambda: input_messages([{"role": "user", "content": 5}]))
    assert error.param == "input[0].content" and error.message.startswith("'content' ")


@pytest.mark.parametrize("output", ["missing", None, 5, {"text": "x"}])
def test_a_function_call_outputs_bad_output_is_named_in_its_message(output):
    item = {"type": "function_call_output", "call_id": "c1"}
    if output != "missing":
        item["output"] = output
    error = _error(lambda: input_messages([{"role": "user", "content": "x"}, item]))
    assert error.param == "input[1].output"
    assert "'output'" in error.message and "content" not in error.message


def test_output_and_text_errors_over_http_and_in_a_conversations_items(gateway):
    reply = _post(gateway, "/v1/responses", {"model": "tiny", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": 5}]}]})
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["param"] == "input[0].content[0].text"
    assert "not supported" not in error["message"]
    reply = _post(gateway, "/v1/responses", {"model": "tiny", "input": [
        {"role": "user", "content": "x"}, {"type": "function_call_output", "call_id": "c1", "output": 5}]})
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["param"] == "input[1].output" and "'output'" in error["message"]
    assert "content" not in error["message"]
    reply = _post(gateway, "/v1/conversations", {"items": [
        {"type": "function_call_output", "call_id": "c1", "output": None}]})
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["param"] == "items[0].output" and "'output'" in error["message"]
    assert "content" not in error["message"]
    reply = _post(gateway, "/v1/conversations", {"items": [
        {"role": "user", "content": [{"type": "input_text", "text": 5}]}]})
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["param"] == "items[0].content[0].text"


# a completion budget that alone fills the context names the budget, not the prompt

def test_a_budget_over_the_whole_context_names_the_budget_field():
    error = context_length_exceeded(5, 10_000, 8192, param="messages", budget_param="max_completion_tokens")
    assert (error.code, error.param) == ("context_length_exceeded", "max_completion_tokens")
    assert error.message.startswith("This model's maximum context length is 8192 tokens. However, you requested "
                                    "10005 tokens (5 in the messages, 10000 in the completion).")
    assert context_length_exceeded(5, 8192, 8192, param="prompt").param == "max_tokens"
    # the prompt is what does not fit: named as before
    assert context_length_exceeded(9000, 10, 8192).param == "messages"
    assert context_length_exceeded(8000, 500, 8192, param="prompt").param == "prompt"
    assert context_length_exceeded(9000, None, 8192).param == "messages"
    assert _error(lambda: completion_budget(5, 10**9, 8192, param="prompt")).param == "max_tokens"
    assert _error(lambda: completion_budget(9000, 10, 8192)).param == "messages"
    assert completion_budget(5, None, 8192) == 8187


def _prompt_tokens(message: str) -> int:
    return int(re.search(r"\((\d+) in the ", message).group(1))


def test_a_max_output_tokens_over_the_context_names_it_and_truncation_cuts_no_turn(gateway):
    reply = _post(gateway, "/v1/responses", {"model": "tiny", "input": "x", "max_output_tokens": 10**9})
    error = reply.json()["error"]
    assert reply.status_code == 400
    assert (error["code"], error["param"]) == ("context_length_exceeded", "max_output_tokens")
    assert " in the input, " in error["message"] and "messages" not in error["message"]   # the Responses API's words
    turns = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "noted"},
             {"role": "user", "content": "second"}, {"role": "assistant", "content": "noted"},
             {"role": "user", "content": "third"}]
    whole = _post(gateway, "/v1/responses", {"model": "tiny", "input": turns, "max_output_tokens": 10**9})
    auto = _post(gateway, "/v1/responses", {"model": "tiny", "input": turns, "max_output_tokens": 10**9,
                                            "truncation": "auto"})
    assert whole.status_code == auto.status_code == 400
    assert whole.json()["error"]["param"] == auto.json()["error"]["param"] == "max_output_tokens"
    # the same prompt was measured: no turn was dropped first
    assert _prompt_tokens(auto.json()["error"]["message"]) == _prompt_tokens(whole.json()["error"]["message"])


def test_a_max_tokens_over_the_context_names_it_on_chat_and_completions(gateway):
    reply = _post(gateway, "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "x"}],
                                                    "max_tokens": 10**9})
    assert reply.status_code == 400
    assert (reply.json()["error"]["code"], reply.json()["error"]["param"]) == ("context_length_exceeded",
                                                                               "max_tokens")
    reply = _post(gateway, "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 10**9})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "max_tokens"
    reply = _post(gateway, "/v1/completions", {"model": "tiny", "prompt": "word " * 9000, "max_tokens": 5})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "prompt"


def test_a_max_completion_tokens_over_the_context_names_it_on_chat(gateway):
    reply = _post(gateway, "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "x"}],
                                                    "max_completion_tokens": 10**9})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "max_completion_tokens"


def test_a_call_no_output_answers_is_a_400_on_responses_and_chat(gateway):
    """Known hazard (QA47): a `function_call` followed by a user turn, not its output, was
    run (OpenAI: "No tool output found for function call ..."); on chat, an assistant
    message's `tool_calls` must be answered before the next turn."""
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    reply = _post(gateway, "/v1/responses", {"model": "tiny", "input": [
        {"role": "user", "content": "x"}, call, {"role": "user", "content": "and then?"}]})
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["param"] == "input[1].call_id", error
    assert "'c1'" in error["message"] and "function_call_output" in error["message"], error
    answered = [{"role": "user", "content": "x"}, call, {"type": "function_call_output", "call_id": "c1", "output": "1"}]
    text_after_call = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}
    for good in (answered, [*answered[:2], text_after_call, answered[2]]):   # calls, then text: as stored
        reply = _post(gateway, "/v1/responses", {"model": "tiny", "input": good, "max_output_tokens": 4})
        assert reply.status_code == 200, reply.text
    asked = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    for after in ([{"role": "tool", "tool_call_id": "c1", "content": "1"}, {"role": "user", "content": "y"}],
                  [{"role": "tool", "tool_call_id": "c1", "content": "1"}]):   # c2 is never answered
        reply = _post(gateway, "/v1/chat/completions", {"model": "tiny", "messages": [
            {"role": "user", "content": "x"}, asked, *after]})
        error = reply.json()["error"]
        assert reply.status_code == 400 and error["param"] == "messages[1].tool_calls[1].id" and "'c2'" in error["message"], error
