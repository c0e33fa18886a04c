"""Every bad input gets an OpenAI-shaped error with the right status, never a 500."""
import json

import httpx
import pytest

from tests.gateway.conftest import MAX_BODY_BYTES

USER = [{"role": "user", "content": "hi"}]
TOOL = {"type": "function", "function": {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def post(gateway, body, *, path="/v1/chat/completions", tenant="alpha", raw=None, headers=None):
    with httpx.Client(base_url=gateway.base_url, timeout=60) as client:
        return client.post(path, headers=headers if headers is not None else gateway.headers(tenant),
                           content=raw if raw is not None else json.dumps(body))


def assert_error(response, status, code=None, param=None):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if code is not None:
        assert error["code"] == code
    if param is not None:
        assert error["param"] == param
    return error


@pytest.mark.parametrize("model", ["tiny", "mock"])
def test_chat_malformed_json_is_400(gateway, model):
    assert_error(post(gateway, None, raw=b'{"model": "' + model.encode() + b'", '), 400, "invalid_json")


@pytest.mark.parametrize("raw", [b"", b"[1, 2]", b'"text"'])
def test_chat_non_object_body_is_400(gateway, raw):
    assert_error(post(gateway, None, raw=raw), 400)


@pytest.mark.parametrize("body,param", [
    ({"model": "tiny", "messages": "hi"}, "messages"),
    ({"model": 5, "messages": USER}, "model"),
    ({"model": "tiny", "messages": USER, "temperature": "hot"}, "temperature"),
    ({"model": "tiny", "messages": USER, "temperature": 3}, "temperature"),
    ({"model": "tiny", "messages": USER, "max_tokens": 0}, "max_tokens"),
    ({"model": "tiny", "messages": USER, "stream": "yes"}, "stream"),
    ({"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"model": "tiny", "messages": [{"role": "user"}]}, "messages[0]"),
    ({"model": "tiny", "messages": USER, "tool_choice": "sometimes", "tools": [TOOL]},
     "tool_choice"),
    ({"messages": USER}, "model"),
    ({"model": "tiny", "messages": USER, "stepahead_replay": {"after_tools": "ls"}},
     "stepahead_replay.after_tools"),
    ({"model": "tiny", "messages": USER, "stepahead_replay": {"tools": ["ls"]}}, "stepahead_replay.tools"),
    ({"model": "tiny", "messages": USER, "presence_penalty": "a"}, "presence_penalty"),
    ({"model": "tiny", "messages": USER, "frequency_penalty": 5}, "frequency_penalty"),
    ({"model": "tiny", "messages": USER, "logit_bias": {"abc": 5}}, "logit_bias.abc"),
    ({"model": "tiny", "messages": USER, "logit_bias": {"12": 101}}, "logit_bias.12"),
    ({"model": "tiny", "messages": USER, "response_format": "json"}, "response_format"),
    ({"model": "tiny", "messages": USER, "response_format": {"type": "xml"}}, "response_format.type"),
    ({"model": "tiny", "messages": USER, "response_format": {"type": "json_schema"}}, "response_format"),
    ({"model": "tiny", "messages": USER, "response_format": {"type": "json_schema", "json_schema": {
        "name": "has space"}}}, "response_format.json_schema.name"),
    ({"model": "tiny", "messages": USER, "response_format": {"type": "json_schema", "json_schema": {
        "name": "n", "schema": "{}"}}}, "response_format.json_schema"),
    ({"model": "tiny", "messages": USER, "response_format": {"type": "json_schema", "json_schema": {
        "name": "n", "schema": {"type": "nope"}}}}, "response_format.json_schema.schema"),
    ({"model": "tiny", "messages": USER, "top_logprobs": 21}, "top_logprobs"),
    ({"model": "tiny", "messages": USER, "seed": 2**64}, "seed"),   # past 64 bits: it wrapped to seed 0
    ({"model": "tiny", "messages": USER, "top_p": -0.1}, "top_p"),
    ({"model": "tiny", "messages": USER, "stream_options": {"include_usage": True}}, "stream_options"),
    ({"model": "mock", "messages": USER, "stream_options": {"include_usage": True}}, "stream_options"),
])
def test_chat_wrong_types_are_400_with_param(gateway, body, param):
    assert_error(post(gateway, body), 400, param=param)


@pytest.mark.parametrize("extra,param,code,says", [
    # not "should be a valid string"; OpenAI's code and wording for a list too long
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "array_above_max_length", "maximum length 4"),
    ({"stop": 5}, "stop", "invalid_value", "valid string"),
    ({"tools": [TOOL], "tool_choice": {"type": "function"}}, "tool_choice.function", "missing_required_parameter",
     "Field required"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "invalid_value", "valid string"),
])
def test_a_bad_union_value_names_the_param_and_what_its_shape_lacks(gateway, extra, param, code, says):
    # pydantic reports every member of a union; the error is the member the value's shape
    # matched, and the param never carries a member's tag ('stop.str', 'tool_choice.NamedToolChoice')
    response = post(gateway, {"model": "tiny", "messages": USER, **extra})
    assert_error(response, 400, code=code, param=param)
    assert says in response.json()["error"]["message"]


def test_chat_penalties_and_logit_bias_are_applied_and_a_bias_past_the_vocabulary_is_400(gateway):
    body = {"model": "tiny", "messages": USER, "max_tokens": 2, "frequency_penalty": 0.5,
            "presence_penalty": -1, "logit_bias": {"12": 5}}
    assert post(gateway, body).status_code == 200
    assert_error(post(gateway, {**body, "logit_bias": {"100000": 5}}), 400, param="logit_bias")


def test_chat_neutral_sampling_options_frameworks_send_are_accepted(gateway):
    body = {"model": "tiny", "messages": USER, "max_tokens": 2, "frequency_penalty": 0,
            "presence_penalty": 0.0, "logit_bias": {}, "response_format": {"type": "text"}}
    assert post(gateway, body).status_code == 200


def test_top_p_0_is_the_likeliest_token_as_openai_allows(gateway):
    for path, body in (("/v1/chat/completions", {"messages": USER}), ("/v1/completions", {"prompt": "x"})):
        replies = [post(gateway, {"model": "tiny", "max_tokens": 4, "top_p": 0, "temperature": 1, **body}, path=path)
                   for _ in range(2)]
        assert [reply.status_code for reply in replies] == [200, 200]
        greedy = post(gateway, {"model": "tiny", "max_tokens": 4, "temperature": 0, **body}, path=path)
        texts = [reply.json()["choices"][0] for reply in [*replies, greedy]]
        assert len({choice.get("text", str(choice.get("message"))) for choice in texts}) == 1


def test_completions_options_the_local_model_lacks_are_400(gateway):
    for extra, param in (({"best_of": 2, "stream": True}, "best_of"), ({"best_of": 2, "n": 3}, "best_of"),
                         ({"best_of": 1, "n": 3}, "best_of"),   # an explicit 1 is below n as well
                         ({"max_completion_tokens": 3}, "max_completion_tokens"),   # was ignored: 16 tokens
                         ({"suffix": "z"}, "suffix"), ({"prompt": ["x", ""]}, "prompt"),
                         ({"best_of": 21}, "best_of")):
        body = {"model": "tiny", "prompt": "x", "max_tokens": 2, **extra}
        assert_error(post(gateway, body, path="/v1/completions"), 400, param=param)


def test_chat_unknown_model_is_404_naming_the_models_served(gateway):
    error = assert_error(post(gateway, {"model": "gpt-9", "messages": USER}), 404, "model_not_found", "model")
    assert error["message"] == ("The model 'gpt-9' does not exist or you do not have access to it. This gateway "
                                "serves: fake, fake-direct, mock, tiny (GET /v1/models lists them).")
    assert "serves" not in post(gateway, {"model": "gpt-9", "messages": USER}, headers={}).text   # a 401 first


def test_a_path_without_its_v1_is_a_404_saying_where_the_api_is(gateway):
    """A base URL set without `/v1` (the usual first mistake): OpenAI's "Invalid URL" plus the hint."""
    error = assert_error(post(gateway, {"model": "tiny", "messages": USER}, path="/chat/completions"), 404,
                         "not_found")
    assert error["message"] == "Invalid URL (POST /chat/completions). The API is under /v1: POST /v1/chat/completions."
    with httpx.Client(base_url=gateway.base_url, timeout=60) as client:
        assert assert_error(client.get("/models"), 404)["message"].endswith("The API is under /v1: GET /v1/models.")
        assert assert_error(client.get("/nowhere"), 404, "not_found")["message"] == "Invalid URL (GET /nowhere)."
        long_path = assert_error(client.get("/" + "x" * 5000), 404)["message"]
        assert len(long_path) < 300


def test_chat_empty_messages_is_400(gateway):
    assert_error(post(gateway, {"model": "tiny", "messages": []}), 400, param="messages")


def test_chat_tool_message_with_unknown_call_id_is_400(gateway):
    messages = USER + [{"role": "assistant", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_2", "content": "sunny"}]
    assert_error(post(gateway, {"model": "tiny", "messages": messages, "tools": [TOOL]}), 400,
                 param="messages[2].tool_call_id")


def test_chat_prompt_over_context_length_is_400(gateway):
    long_text = "x" * 9000   # the tiny model: one token per byte, 8192-token context
    error = assert_error(post(gateway, {"model": "tiny", "messages": [
        {"role": "user", "content": long_text}]}), 400, "context_length_exceeded", "messages")
    assert error["message"].startswith("This model's maximum context length is 8192 tokens. However, your messages "
                                       "resulted in ")   # no max_tokens: the prompt alone is over
    assert_error(post(gateway, {"model": "tiny", "messages": USER, "max_tokens": 8190}), 400,
                 "context_length_exceeded")


def test_completions_token_prompt_over_context_length_is_400_naming_the_prompt(gateway):
    error = assert_error(post(gateway, {"model": "tiny", "prompt": [65] * 8200},
                              path="/v1/completions"), 400, "context_length_exceeded", "prompt")
    assert "(8200 in the prompt," in error["message"]


def test_chat_body_over_size_limit_is_413(gateway):
    huge = {"model": "tiny", "messages": [{"role": "user", "content": "x" * MAX_BODY_BYTES}]}
    assert_error(post(gateway, huge), 413, "request_too_large")


def nested_schema(levels):
    schema = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


@pytest.mark.parametrize("path,deep_body", [
    ("/v1/chat/completions", {"model": "tiny", "messages": USER, "tools": [
        {"type": "function", "function": {"name": "f", "parameters": nested_schema(300)}}]}),
    ("/v1/chat/completions", {"model": "mock", "messages": USER, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": nested_schema(300)}}}),
    ("/v1/completions", {"model": "tiny", "prompt": "x", "metadata": nested_schema(300)}),
    ("/v1/responses", {"model": "tiny", "input": "hi", "text": {"format": {
        "type": "json_schema", "name": "x", "schema": nested_schema(300)}}}),
])
def test_bodies_nested_too_deeply_are_400_not_500(gateway, path, deep_body):
    """Schema checks and re-encoding recurse: a body nested past MAX_JSON_DEPTH is refused
    up front, whether Python's parser can read it (300 levels) or not (5,000)."""
    error = assert_error(post(gateway, deep_body, path=path), 400, "invalid_json")
    assert "levels deep" in error["message"]
    assert_error(post(gateway, None, path=path, raw=b'{"model": ' * 5000), 400, "invalid_json")


@pytest.mark.parametrize("path,raw", [
    ("/v1/chat/completions", b'{"model": "tiny", "messages": [{"role": "user", "content": "a\\ud800b"}]}'),
    ("/v1/chat/completions", b'{"model": "\\udfff", "messages": [{"role": "user", "content": "hi"}]}'),
    ("/v1/completions", b'{"model": "tiny", "prompt": "\xed\xa0\x80"}'),   # UTF-8-encoded surrogate
    ("/v1/responses", b'{"model": "tiny", "input": [{"type": "function_call_output", "call_id": "\\uD83D", '
                      b'"output": "x"}]}'),
])
def test_unpaired_surrogates_are_400_not_500(gateway, path, raw):
    """JSON lets `\\ud800` through unpaired; such a string has no UTF-8 form, so echoing it
    in an error or tokenizing it used to fail with a 500."""
    error = assert_error(post(gateway, None, path=path, raw=raw), 400, "invalid_json")
    assert "surrogate" in error["message"]


def test_paired_surrogate_escapes_are_the_character_they_spell(gateway):
    raw = b'{"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}'
    assert post(gateway, None, raw=raw).status_code == 200


def test_a_tool_schema_nested_just_under_the_limit_is_served(gateway):
    body = {"model": "tiny", "messages": USER, "max_tokens": 30, "tool_choice": "required",
            "tools": [{"type": "function", "function": {"name": "f", "parameters": nested_schema(29)}}]}
    reply = post(gateway, body)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "f"


def test_deeply_nested_tool_arguments_in_history_are_served(gateway):
    deep_arguments = "[" * 1500 + "]" * 1500   # a string: only the parsers meet its depth
    messages = USER + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": deep_arguments}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    reply = post(gateway, {"model": "tiny", "messages": messages, "tools": [TOOL], "max_tokens": 2})
    assert reply.status_code == 200, reply.text


def test_chat_body_over_size_limit_without_content_length_is_413(gateway):
    def chunks():
        yield b'{"model": "tiny", "messages": [{"role": "user", "content": "'
        for _ in range(MAX_BODY_BYTES // 4096 + 2):
            yield b"x" * 4096
        yield b'"}]}'
    with httpx.Client(base_url=gateway.base_url, timeout=60) as client:
        response = client.post("/v1/chat/completions", headers=gateway.headers(),
                               content=chunks())
    assert_error(response, 413)


@pytest.mark.parametrize("parameters", [
    {"type": "object", "properties": {"city": {"type": "strin"}}},
    {"type": "object", "properties": "city"},
    {"type": "array"},
])
def test_chat_invalid_tool_schema_is_400(gateway, parameters):
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters}}
    assert_error(post(gateway, {"model": "tiny", "messages": USER, "tools": [tool]}), 400,
                 "invalid_function_parameters", "tools[0].function.parameters")


def test_chat_bad_tool_name_is_400(gateway):
    tool = {"type": "function", "function": {"name": "has space"}}
    assert_error(post(gateway, {"model": "tiny", "messages": USER, "tools": [tool]}), 400)


def test_chat_unknown_tool_choice_name_is_400(gateway):
    body = {"model": "tiny", "messages": USER, "tools": [TOOL],
            "tool_choice": {"type": "function", "function": {"name": "nope"}}}
    assert_error(post(gateway, body), 400, param="tool_choice")


def test_chat_tool_choice_without_tools_is_400(gateway):
    assert_error(post(gateway, {"model": "tiny", "messages": USER, "tool_choice": "required"}),
                 400, param="tool_choice")


@pytest.mark.parametrize("n", [0, 129, "two"])
def test_chat_n_outside_1_to_128_is_400(gateway, n):
    assert_error(post(gateway, {"model": "tiny", "messages": USER, "n": n}), 400, param="n")


def test_chat_image_part_to_text_model_is_400(gateway):
    messages = [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]
    assert_error(post(gateway, {"model": "tiny", "messages": messages}), 400,
                 "unsupported_content")


def test_completions_token_ids_outside_vocabulary_are_400(gateway):
    assert_error(post(gateway, {"model": "tiny", "prompt": [10 ** 9]}, path="/v1/completions"),
                 400, param="prompt")


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer sk-wrong"},
                                     {"Authorization": "Token sk-test-alpha"}])
def test_requests_without_a_valid_key_are_401(gateway, headers):
    assert_error(post(gateway, {"model": "tiny", "messages": USER}, headers=headers), 401,
                 "invalid_api_key")
    with httpx.Client(base_url=gateway.base_url) as client:
        assert client.get("/v1/models", headers=headers).status_code == 401


def test_unknown_route_and_method_are_openai_shaped(gateway):
    with httpx.Client(base_url=gateway.base_url) as client:
        assert_error(client.get("/v1/nothing"), 404)
        wrong_method = client.get("/v1/chat/completions")
        assert_error(wrong_method, 405)
        assert "POST" in wrong_method.headers["allow"]   # as HTTP asks of a 405
        assert_error(client.get("/openapi.json"), 404)   # no unauthenticated route map


def test_upstream_errors_map_to_openai_shapes(gateway):
    def ask(text):
        return post(gateway, {"model": "fake", "messages": [{"role": "user", "content": text}]})
    assert_error(ask("status:400"), 400, "context_length_exceeded")
    assert_error(ask("status:401"), 502, "upstream_auth_error")
    assert_error(ask("status:429"), 429, "rate_limit_exceeded")
    assert ask("status:429").headers["Retry-After"]
    assert_error(ask("status:500"), 502)


def test_error_after_stream_began_is_an_sse_error_event(gateway):
    body = {"model": "fake", "stream": True,
            "messages": [{"role": "user", "content": "midstream-error"}]}
    with httpx.Client(base_url=gateway.base_url, timeout=60) as client:
        with client.stream("POST", "/v1/chat/completions", headers=gateway.headers(),
                           json=body) as response:
            assert response.status_code == 200
            events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] != "[DONE]"
    assert "error" in json.loads(events[-1])


@pytest.mark.parametrize("model", ["tiny", "mock"])
@pytest.mark.parametrize("prompt", [[], [[]], [[-1]], ["a", [1]], 5, [True]])
def test_completions_malformed_prompts_are_400_naming_prompt(gateway, model, prompt):
    """Checked before any backend: an empty list used to reach litellm, which failed it as a 502."""
    error = assert_error(post(gateway, {"model": model, "prompt": prompt}, path="/v1/completions"),
                         400, "invalid_value", param="prompt")
    assert "token ids" in error["message"]


@pytest.mark.parametrize("extra,param", [
    ({"functions": [{"name": "f", "parameters": {"type": "object"}}]}, "functions"),
    ({"function_call": "auto"}, "function_call"),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"web_search_options": {}}, "web_search_options"),
])
def test_chat_parameters_a_local_model_cannot_honour_are_400(gateway, extra, param):
    """Ignoring these would change the answer (no tools, no audio, no search)."""
    body = {"model": "tiny", "messages": USER, "max_tokens": 2, **extra}
    assert_error(post(gateway, body), 400, "unsupported_parameter", param=param)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
@pytest.mark.parametrize("metadata,param", [({f"k{n}": "v" for n in range(17)}, "metadata"),
                                            ({"k" * 65: "v"}, "metadata"), ({"k": "v" * 513}, "metadata.k")])
def test_metadata_beyond_openais_limits_is_400(gateway, path, metadata, param):
    body = {"model": "tiny", "messages": USER, "input": "x", "max_tokens": 2, "metadata": metadata}
    assert_error(post(gateway, body, path=path), 400, "invalid_value", param=param)


def test_chat_hints_a_local_model_may_ignore_are_accepted(gateway):
    body = {"model": "tiny", "messages": USER, "max_tokens": 2, "modalities": ["text"], "service_tier": "auto",
            "store": True, "reasoning_effort": "low", "prompt_cache_key": "k", "prediction": {
                "type": "content", "content": "x"}}
    assert post(gateway, body).status_code == 200


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings",
                                  "/v1/conversations"])
def test_an_integer_past_pythons_digit_limit_is_400_invalid_json(gateway, path):
    raw = b'{"model": "tiny", "messages": [], "input": "x", "prompt": "x", "seed": ' + b"9" * 5000 + b"}"
    error = assert_error(post(gateway, None, path=path, raw=raw), 400, "invalid_json")
    assert error["message"] == ("We could not parse the JSON body of your request: a number in it has more than "
                                "4,300 digits.")   # not the interpreter's advice to raise its limit


@pytest.mark.parametrize("parameters", [
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 10, "maximum": 1}}, "required": ["a"]},
    {"type": "object", "properties": {"a": False}, "required": ["a"]},
    {"type": "object", "properties": {"a": {"type": "array", "minItems": 5, "maxItems": 2}}},
])
def test_a_tool_schema_no_value_meets_is_400_naming_the_tool(gateway, parameters):
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters}}
    error = assert_error(post(gateway, {"model": "tiny", "messages": USER, "tools": [tool], "tool_choice": "required",
                                        "max_tokens": 8}),
                         400, "invalid_function_parameters", "tools[0].function.parameters")
    assert "no value can meet it" in error["message"]
    body = {"model": "tiny", "messages": [{"role": "user", "content": "json"}], "max_tokens": 8,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": parameters}}}
    assert_error(post(gateway, body), 400, param="response_format.json_schema.schema")


@pytest.mark.parametrize("stream", [False, True])
def test_boolean_subschemas_are_served_and_the_reply_keeps_them(gateway, stream):
    from jsonschema import Draft202012Validator
    parameters = {"type": "object", "properties": {"a": True, "b": False, "c": {"type": "integer"}},
                  "required": ["a", "c"]}
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters}}
    body = {"model": "tiny", "messages": USER, "tools": [tool], "tool_choice": "required", "max_tokens": 24,
            "seed": 3, "stream": stream}
    response = post(gateway, body)
    assert response.status_code == 200, response.text
    if stream:
        events = [json.loads(line[6:]) for line in response.text.splitlines()
                  if line.startswith("data: {")]
        assert response.text.rstrip().endswith("data: [DONE]")
        arguments = "".join(call["function"].get("arguments") or "" for event in events
                            for choice in event["choices"] for call in choice["delta"].get("tool_calls") or [])
    else:
        arguments = response.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    assert Draft202012Validator(parameters).is_valid(json.loads(arguments)), arguments


@pytest.mark.parametrize("stop", ["", [""], ["", "never-seen-stop"]])
def test_an_empty_stop_string_stops_nowhere(gateway, stop):
    body = {"model": "tiny", "messages": USER, "max_tokens": 6, "seed": 4, "logprobs": True}
    plain = post(gateway, body).json()["choices"][0]
    stopped = post(gateway, {**body, "stop": stop}).json()["choices"][0]
    assert stopped["finish_reason"] == plain["finish_reason"] == "length"
    assert stopped["message"]["content"] == plain["message"]["content"]
    assert len(stopped["logprobs"]["content"]) == 6


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-2.5e400"])
def test_a_body_holding_what_json_has_not_is_400_and_nothing_is_stored(gateway, literal):
    """Known hazard (QA50): Python's reader took NaN and Infinity (and read 1e999 as
    infinity); a conversation item holding one was stored though answered 500, and every
    later read of the conversation failed."""
    error = assert_error(post(gateway, None, raw=b'{"model": "tiny", "temperature": ' + literal +
                              b', "messages": [{"role": "user", "content": "x"}]}'), 400, "invalid_json")
    assert "JSON" in error["message"] or "64-bit float" in error["message"]
    headers = gateway.headers("alpha")
    conversation = httpx.post(f"{gateway.base_url}/v1/conversations", json={}, headers=headers, timeout=30).json()
    items_url = f"{gateway.base_url}/v1/conversations/{conversation['id']}/items"
    raw = b'{"items": [{"role": "user", "content": [{"type": "input_text", "text": "x"}], "n": ' + literal + b"}]}"
    refused = httpx.post(items_url, content=raw, headers={**headers, "content-type": "application/json"}, timeout=30)
    assert_error(refused, 400, "invalid_json")
    listed = httpx.get(items_url, headers=headers, timeout=30)
    assert listed.status_code == 200 and listed.json()["data"] == []


@pytest.mark.parametrize("path,field", [("/v1/chat/completions", "messages"), ("/v1/responses", "input")])
def test_more_messages_than_a_request_may_hold_is_400_before_validation(gateway, path, field, monkeypatch):
    """Known hazard (QA50): 200,000 small messages in an 8 MiB body took seconds of the
    event loop (validation, session hashing) before any tenant limit applied. (The bound
    is lowered here: the test gateway's bodies are small.)"""
    import gateway.chat_checks as chat_checks

    assert chat_checks.MAX_MESSAGES == 10_000
    monkeypatch.setattr(chat_checks, "MAX_MESSAGES", 50)

    def body(count: int) -> dict:
        return {"model": "tiny", field: [{"role": "user", "content": "x"}] * count, "max_tokens": 1}
    error = assert_error(post(gateway, body(51), path=path), 400, "array_above_max_length", field)
    assert "maximum length 50, but got an array with length 51" in error["message"]
    assert post(gateway, {**body(50), "max_tokens": 1} if field == "messages" else
                {"model": "tiny", field: body(50)[field], "max_output_tokens": 16}, path=path).status_code == 200
