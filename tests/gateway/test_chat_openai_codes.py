"""The chat completions request surface against OpenAI's: both completion limits at once,
OpenAI's codes for bounds and empty arrays, legacy function-calling in the history, and
the stream chunks' `system_fingerprint` and first-delta `refusal` (QA81's findings)."""
from __future__ import annotations

import json

import pytest

from gateway.backend import Finished, TextDelta, Usage
from gateway.chat_checks import refuse_legacy_function_calling
from gateway.errors import ApiError
from gateway.local_refusals import refuse_unsupported_chat_params
from gateway.openai_format import ChunkWriter, ResponseHeader
from gateway.schemas import ChatCompletionRequest, CompletionRequest, validate

USER = {"role": "user", "content": "Hi"}


def refused(body: dict, model_cls=ChatCompletionRequest) -> ApiError:
    with pytest.raises(ApiError) as caught:
        validate(model_cls, {"model": "m", **body})
    assert caught.value.status == 400 and caught.value.type == "invalid_request_error"
    return caught.value


def test_max_tokens_beside_max_completion_tokens_is_refused_as_openai_refuses_it():
    error = refused({"messages": [USER], "max_tokens": 3, "max_completion_tokens": 6})
    assert (error.code, error.param) == ("invalid_parameter_combination", "max_tokens")
    assert error.message == "Setting 'max_tokens' and 'max_completion_tokens' at the same time is not supported."
    # one of them (or the other null, as SDKs send it) is a limit, whichever it is
    for fields, limit in (({"max_tokens": 3}, 3), ({"max_completion_tokens": 6}, 6),
                          ({"max_tokens": None, "max_completion_tokens": 6}, 6), ({}, None)):
        assert validate(ChatCompletionRequest, {"model": "m", "messages": [USER], **fields}).completion_limit() == limit


def test_empty_messages_are_an_empty_array_as_empty_tools_are():
    error = refused({"messages": []})
    assert (error.code, error.param) == ("empty_array", "messages")
    assert error.message == ("Invalid 'messages': empty array. Expected an array with minimum length 1, "
                             "but got an empty array instead.")


@pytest.mark.parametrize("fields, param, code, says", [
    ({"n": 129}, "n", "integer_above_max_value", "Expected a value <= 128, but got 129 instead."),
    ({"n": 0}, "n", "integer_below_min_value", "Expected a value >= 1, but got 0 instead."),
    ({"top_logprobs": 21}, "top_logprobs", "integer_above_max_value", "Expected a value <= 20, but got 21"),
    ({"max_tokens": 0}, "max_tokens", "integer_below_min_value", "Expected a value >= 1, but got 0"),
    ({"seed": 2**63}, "seed", "integer_above_max_value", f"Expected a value <= {2**63 - 1}"),
    ({"temperature": 2.5}, "temperature", "decimal_above_max_value", "Expected a value <= 2, but got 2.5 instead."),
    ({"temperature": 3}, "temperature", "decimal_above_max_value", "Expected a value <= 2, but got 3 instead."),
    ({"top_p": -0.1}, "top_p", "decimal_below_min_value", "Expected a value >= 0, but got -0.1 instead."),
    ({"frequency_penalty": 5}, "frequency_penalty", "decimal_above_max_value", "Expected a value <= 2"),
    ({"logit_bias": {"12": 101}}, "logit_bias.12", "decimal_above_max_value", "Expected a value <= 100"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "array_above_max_length",
     "array too long. Expected an array with maximum length 4, but got an array with length 5 instead."),
])
def test_a_value_past_its_bound_has_openais_code_and_wording(fields, param, code, says):
    error = refused({"messages": [USER], **fields})
    assert (error.code, error.param) == (code, param)
    assert error.message.startswith(f"Invalid '{param}': ") and says in error.message


def test_other_failures_keep_invalid_value_and_a_short_list_is_array_below_min_length():
    assert refused({"messages": [USER], "temperature": "hot"}).code == "invalid_value"
    assert refused({"messages": [{"role": "wizard", "content": "x"}]}).code == "invalid_value"
    assert refused({"messages": [USER], "response_format": {"type": "xml"}}).code == "invalid_value"
    assert refused({"messages": [USER], "metadata": {"k": 5}}).code == "invalid_value"   # a dict, not a bound
    assert refused({"prompt": "x", "best_of": 21}, CompletionRequest).code == "integer_above_max_value"
    from gateway.validation_errors import openai_validation_error
    short = {"type": "too_short", "loc": ("items",), "msg": "List should have at least 2 items after validation, "
             "not 1", "input": [1], "ctx": {"field_type": "List", "min_length": 2, "actual_length": 1}}
    error = openai_validation_error([short], {"items": [1]})
    assert (error.code, error.param) == ("array_below_min_length", "items")
    assert "Expected an array with minimum length 2, but got an array with length 1 instead." in error.message


def test_a_function_role_message_is_unsupported_and_says_to_send_a_tool_message():
    body = {"messages": [USER, {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "function", "name": "f", "content": "42"}]}
    error = refused(body)
    assert (error.code, error.param) == ("unsupported_parameter", "messages[2].role")
    assert "tool message" in error.message


def _chat(messages: list) -> ChatCompletionRequest:
    return validate(ChatCompletionRequest, {"model": "m", "messages": messages})


@pytest.mark.parametrize("field, value, says, refuse", [
    # every model: an upstream's function_call reply has no place in the gateway's replies (QA82)
    ("function_call", {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}, "tool_calls",
     refuse_legacy_function_calling),
    ("audio", {"id": "audio_abc"}, "content", refuse_unsupported_chat_params),   # a local model's chat template
])
def test_a_history_assistants_legacy_function_call_or_audio_is_refused(field, value, says, refuse):
    for assistant in ({"role": "assistant", "content": "ok", field: value},
                      {"role": "assistant", "content": None, field: value},   # only it: not "needs content"
                      {"role": "assistant", field: value}):
        request = _chat([USER, assistant, USER])
        with pytest.raises(ApiError) as caught:
            refuse(request)
        assert (caught.value.code, caught.value.param) == ("unsupported_parameter", f"messages[1].{field}")
        assert says in caught.value.message


def test_null_legacy_fields_in_the_history_are_accepted_as_sdks_send_them():
    request = _chat([USER, {"role": "assistant", "content": "ok", "function_call": None, "audio": None}, USER])
    refuse_unsupported_chat_params(request)
    refuse_legacy_function_calling(request)
    error = refused({"messages": [USER, {"role": "assistant", "content": None, "function_call": None}]})
    assert (error.code, error.param) == ("invalid_value", "messages[1]")   # nothing to send: still needs content


def _chunks(raw: bytes) -> list[dict]:
    return [json.loads(line.removeprefix(b"data: ")) for line in raw.split(b"\n\n") if line.startswith(b"data: {")]


@pytest.mark.parametrize("is_chat", [True, False])
def test_every_stream_chunk_has_a_system_fingerprint_as_the_whole_reply_has(is_chat):
    writer = ChunkWriter(ResponseHeader("chatcmpl-1", "m", 1700000000), is_chat=is_chat, include_usage=True,
                         num_choices=2)
    raw = writer.opening() + b"".join(writer.event(event) for event in (
        TextDelta("Hi", choice=0), TextDelta("Yo", choice=1), Finished("stop", Usage(3, 1), "w0", choice=0),
        Finished("stop", Usage(3, 1), "w0", choice=1)))
    chunks = _chunks(raw)
    assert len(chunks) == (7 if is_chat else 5)
    assert all("system_fingerprint" in chunk and chunk["system_fingerprint"] is None for chunk in chunks)


def test_a_chat_streams_first_delta_has_a_null_refusal_as_openais_does():
    writer = ChunkWriter(ResponseHeader("chatcmpl-1", "m", 1700000000), is_chat=True, include_usage=False,
                         num_choices=2)
    deltas = [chunk["choices"][0]["delta"] for chunk in _chunks(writer.opening())]
    assert deltas == [{"role": "assistant", "content": "", "refusal": None}] * 2
    call = ChunkWriter(ResponseHeader("chatcmpl-1", "m", 1700000000), is_chat=True, include_usage=False, is_call=True)
    assert _chunks(call.opening())[0]["choices"][0]["delta"] == {"role": "assistant", "content": None,
                                                                   "refusal": None}


def test_an_upstreams_fingerprint_still_names_the_chunks_from_its_finish_on():
    writer = ChunkWriter(ResponseHeader("chatcmpl-1", "m", 1700000000), is_chat=True, include_usage=True)
    raw = writer.opening() + writer.event(TextDelta("Hi")) + writer.event(
        Finished("stop", Usage(3, 1), system_fingerprint="fp_up"))
    assert [chunk["system_fingerprint"] for chunk in _chunks(raw)] == [None, None, "fp_up", "fp_up"]
