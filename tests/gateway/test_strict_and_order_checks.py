"""Request checks from QA220 and QA208, as OpenAI's: a `strict: true` schema using a keyword
a local model's reply cannot be held to is a 400 naming it and its place (QA220 F3); on
chat, an assistant message between a call and its answers is a 400 (F6), as is
`parallel_tool_calls` without `tools` (QA208 F2); the Responses API keeps its own rules."""
import httpx
import pytest
from pydantic import BaseModel

from gateway.chat_checks import check_chat_request, refuse_unsteerable_strict
from gateway.errors import ApiError
from gateway.schema_keywords import is_steerable, strict_refusal
from gateway.responses_format import ResponsesRequest, to_chat_body
from gateway.schema_checks import SchemaChecker
from gateway.schemas import ChatCompletionRequest, validate

USER = {"role": "user", "content": "x"}


def _obj(**members: dict) -> dict:
    return {"type": "object", "properties": members, "required": list(members), "additionalProperties": False}


class Located(BaseModel):
    point: tuple[int, int]
    label: str


@pytest.mark.parametrize("schema, keyword, place", [
    (Located.model_json_schema(), "prefixItems", "properties.point.prefixItems"),   # what the SDK's parse() sends
    ({"allOf": [_obj(a={"type": "string"})]}, "allOf", "allOf"),
    (_obj(n={"anyOf": [{"type": "null"}, {"type": "string", "not": {"const": ""}}]}), "not", "properties.n.anyOf[1].not"),
    (_obj(t={"type": "array", "items": [{"type": "string"}]}), "items", "properties.t.items"),
    (_obj(a={"if": {"type": "string"}, "then": {"minLength": 1}}), "if", "properties.a.if"),
    (_obj(a={"type": "object", "dependentRequired": {"x": ["y"]}}), "dependentRequired",
     "properties.a.dependentRequired"),
    # QA223 F2: a dict's values (pydantic's dict[str, tuple[int, str]]) are walked too
    (_obj(m={"type": "object", "additionalProperties": {"type": "array", "prefixItems": [{"type": "integer"}]}}),
     "prefixItems", "properties.m.additionalProperties.prefixItems"),
])
def test_strict_refusal_names_the_keyword_and_its_place(schema, keyword, place):
    assert strict_refusal(schema) == (keyword, place)
    assert not is_steerable(schema)


@pytest.mark.parametrize("schema", [
    _obj(code={"type": "string", "pattern": "^(?=[A-Z])[A-Z]{3}$"}),   # a pattern the reader cannot spell
    _obj(u={"anyOf": [_obj(a={"type": "string"}), _obj(b={"type": "string"})]}),   # union of models: both "{"
    {"type": "object", "additionalProperties": {"type": "string"}},
    _obj(a={"type": "array", "items": _obj(b={"type": "integer", "minimum": 1})}, t={"type": "string"}),
    # unsteered but not refused: OpenAI's strict mode may take them (a set[str] tool parameter of the Agents SDK)
    _obj(a=_obj(b={"type": "array", "items": {"type": "integer"}, "uniqueItems": True})),
    {**_obj(p={"$ref": "#/$defs/P"}), "$defs": {"P": {"type": "object", "minProperties": 1}}},
    _obj(m={"type": "object", "propertyNames": {"maxLength": 3}}),
    _obj(m={"type": "object", "patternProperties": {"^x": {}}}),
    _obj(a={"type": "array", "items": {}, "contains": {"const": 1}}),
    _obj(a={"type": "object", "unevaluatedProperties": False}),
])
def test_strict_refusal_leaves_what_openai_strict_mode_takes(schema):
    assert strict_refusal(schema) is None   # unsteered or steered, but not refused


def test_strict_refusal_finds_a_refused_keyword_below_or_beside_one_taken_unenforced():
    """A part holding a keyword `strict` takes unenforced (uniqueItems, minProperties) was
    not walked further, and only its first such keyword was named: a refused one beside or
    below it passed."""
    below = _obj(s={"type": "array", "uniqueItems": True, "items": {"type": "string", "not": {"const": ""}}})
    assert strict_refusal(below) == ("not", "properties.s.items.not")
    beside = _obj(m={"type": "object", "minProperties": 1, "allOf": [_obj(a={"type": "string"})]})
    assert strict_refusal(beside) == ("allOf", "properties.m.allOf")


def test_strict_refusal_finds_a_keyword_past_a_part_that_is_only_unsteered():
    schema = _obj(u={"anyOf": [_obj(a={"type": "string"}), _obj(b={"type": "array", "items": {"type": "string"},
                                                                    "uniqueItems": True}, c={"not": {}})]})
    assert strict_refusal(schema) == ("not", "properties.u.anyOf[1].properties.c.not")


def _chat(**fields) -> ChatCompletionRequest:
    return validate(ChatCompletionRequest, {"model": "m", "messages": [USER], **fields})


def _format(schema: dict, strict: bool | None) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "Located", "schema": schema,
                                                    **({} if strict is None else {"strict": strict})}}


def _tool(schema: dict, strict: bool | None) -> dict:
    return {"type": "function", "function": {"name": "f", "parameters": schema,
                                             **({} if strict is None else {"strict": strict})}}


def test_a_strict_response_format_with_a_tuple_is_a_400_naming_it():
    with pytest.raises(ApiError) as raised:
        refuse_unsteerable_strict(_chat(response_format=_format(Located.model_json_schema(), True)))
    error = raised.value
    assert (error.status, error.type, error.param, error.code) == (400, "invalid_request_error", "response_format",
                                                                   "invalid_json_schema")
    assert "'Located'" in error.message and "'prefixItems' (at properties.point.prefixItems)" in error.message


def test_a_strict_tool_with_an_unsteerable_keyword_is_a_400_naming_its_parameters():
    other = _tool(_obj(a={"type": "string"}), True)
    with pytest.raises(ApiError) as raised:
        refuse_unsteerable_strict(_chat(tools=[other, _tool({"allOf": [_obj(a={"type": "string"})]}, True)]))
    assert (raised.value.param, raised.value.code) == ("tools[1].function.parameters", "invalid_function_parameters")
    assert "function 'f'" in raised.value.message and "'allOf' (at allOf)" in raised.value.message


@pytest.mark.parametrize("strict", [False, None])
def test_without_strict_an_unsteerable_schema_is_taken_as_before(strict):
    schema = Located.model_json_schema()
    refuse_unsteerable_strict(_chat(response_format=_format(schema, strict), tools=[_tool(schema, strict)]))


def _order_error(messages: list[dict], answers_follow_calls: bool = True) -> ApiError | None:
    request = validate(ChatCompletionRequest, {"model": "m", "messages": messages})
    try:
        check_chat_request(request, "alpha", SchemaChecker(), answers_follow_calls)
    except ApiError as error:
        return error
    return None


def _calls(*ids: str) -> dict:
    return {"role": "assistant", "tool_calls": [{"id": i, "type": "function", "function": {"name": "f",
                                                                                           "arguments": "{}"}}
                                                for i in ids]}


def test_an_assistant_message_between_a_call_and_its_answer_is_a_400_on_chat():
    error = _order_error([USER, _calls("c1"), {"role": "assistant", "content": "wait"},
                          {"role": "tool", "tool_call_id": "c1", "content": "1"}])
    assert error is not None and (error.status, error.param) == (400, "messages[2].role")
    assert error.message == ("An assistant message with 'tool_calls' must be followed by tool messages responding to "
                             "each 'tool_call_id'. The following tool_call_ids did not have response messages: c1")


def test_an_assistant_message_after_some_answers_names_the_calls_still_waiting():
    error = _order_error([USER, _calls("c1", "c2"), {"role": "tool", "tool_call_id": "c1", "content": "1"},
                          _calls("c3"), {"role": "tool", "tool_call_id": "c2", "content": "2"},
                          {"role": "tool", "tool_call_id": "c3", "content": "3"}])
    assert error is not None and error.param == "messages[3].role" and error.message.endswith(": c2")


def test_answers_right_after_their_calls_then_an_assistant_message_pass():
    assert _order_error([USER, _calls("c1", "c2"), {"role": "tool", "tool_call_id": "c2", "content": "2"},
                         {"role": "tool", "tool_call_id": "c1", "content": "1"},
                         {"role": "assistant", "content": "done"}, USER]) is None


def test_a_responses_request_keeps_an_assistant_message_between_call_and_output():
    # Responses pairs calls and outputs by call_id: a response's items sent back (calls, then text) come so
    assert _order_error([USER, _calls("c1"), {"role": "assistant", "content": "wait"},
                         {"role": "tool", "tool_call_id": "c1", "content": "1"}], answers_follow_calls=False) is None


def test_parallel_tool_calls_without_tools_is_a_400_on_chat():
    for value in (True, False):
        with pytest.raises(ApiError) as raised:
            check_chat_request(_chat(parallel_tool_calls=value), "alpha", SchemaChecker())
        assert (raised.value.status, raised.value.param) == (400, "parallel_tool_calls")
        assert raised.value.message == ("Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only "
                                        "allowed when 'tools' are specified.")
    check_chat_request(_chat(parallel_tool_calls=False, tools=[_tool(_obj(a={"type": "string"}), None)]),
                       "alpha", SchemaChecker())
    check_chat_request(_chat(parallel_tool_calls=None), "alpha", SchemaChecker())   # null: as not sent


def test_a_responses_request_without_tools_keeps_parallel_tool_calls_to_itself():
    request = validate(ResponsesRequest, {"model": "m", "input": "x", "parallel_tool_calls": False})
    body = to_chat_body(request)
    assert "parallel_tool_calls" not in body
    check_chat_request(validate(ChatCompletionRequest, body), "alpha", SchemaChecker(), False)
    tools = [{"type": "function", "name": "f", "parameters": _obj(a={"type": "string"})}]
    with_tools = to_chat_body(validate(ResponsesRequest, {"model": "m", "input": "x", "parallel_tool_calls": False,
                                                          "tools": tools}))
    assert with_tools["parallel_tool_calls"] is False


def test_parallel_tool_calls_without_tools_on_the_gateway(gateway):
    """Chat refuses it, as OpenAI's chat API; a Responses request without tools is served and
    echoes it, as OpenAI's Responses API."""
    headers = gateway.headers("alpha")
    reply = httpx.post(f"{gateway.base_url}/v1/chat/completions", headers=headers, timeout=60, json={
        "model": "tiny", "messages": [USER], "max_tokens": 2, "parallel_tool_calls": False})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "parallel_tool_calls", reply.text
    reply = httpx.post(f"{gateway.base_url}/v1/responses", headers=headers, timeout=60, json={
        "model": "tiny", "input": "x", "max_output_tokens": 2, "parallel_tool_calls": False})
    assert reply.status_code == 200 and reply.json()["parallel_tool_calls"] is False, reply.text
    # a local model refuses a strict schema it cannot hold a reply to (what the SDK's parse() of a tuple sends)
    strict = {"type": "json_schema", "json_schema": {"name": "Located", "strict": True,
                                                     "schema": Located.model_json_schema()}}
    reply = httpx.post(f"{gateway.base_url}/v1/chat/completions", headers=headers, timeout=60, json={
        "model": "tiny", "messages": [USER], "max_tokens": 2, "response_format": strict})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "response_format", reply.text
    assert "properties.point.prefixItems" in reply.json()["error"]["message"]
