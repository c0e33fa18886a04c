"""A union field's wrong type names the field, never pydantic's tag of a union member
(QA224 F6: an object `input` was `param: "input.str"`, "Input should be a valid string"):
`param` is the field, the code `invalid_type`, and the message says what `input` takes."""
from __future__ import annotations

import pytest

from gateway.errors import ApiError
from gateway.responses_format import ResponsesRequest
from gateway.schemas import ChatCompletionRequest, validate

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}


def refusal(model_cls, body: dict) -> ApiError:
    with pytest.raises(ApiError) as refused:
        validate(model_cls, body)
    return refused.value


@pytest.mark.parametrize("value, got", [({"role": "user", "content": "hi"}, "an object"), (5, "an integer"),
                                        (True, "a boolean"), (None, "null")])
def test_an_input_of_the_wrong_type_names_input_and_what_it_takes(value, got):
    error = refusal(ResponsesRequest, {"model": "tiny", "input": value})
    assert (error.status, error.param, error.code) == (400, "input", "invalid_type")
    assert error.message == (f"Invalid type for 'input': expected a string or an array of input items, "
                             f"but got {got} instead.")


@pytest.mark.parametrize("model_cls, body, param", [
    (ResponsesRequest, {"model": "tiny", "input": "x", "tool_choice": 5}, "tool_choice"),
    (ResponsesRequest, {"model": "tiny", "input": "x", "conversation": [1]}, "conversation"),
    (ChatCompletionRequest, {**CHAT, "stop": {"a": 1}}, "stop"),
    (ChatCompletionRequest, {**CHAT, "messages": [{"role": "user", "content": {"text": "hi"}}]},
     "messages[0].content"),
])
def test_every_union_field_is_named_without_its_member_tags(model_cls, body, param):
    """An object refused by every member was named by the first member's tag (`stop.str`),
    which the object lacks; any field is named by itself (its message is pydantic's)."""
    error = refusal(model_cls, body)
    assert (error.status, error.param) == (400, param), error.message
    assert f"'{param}'" in error.message and ".str'" not in error.message


def test_a_member_the_value_matched_and_a_missing_key_are_still_named_inside_it():
    """The deepest error still wins (an array `input` of a number names `input[0]`), and a
    missing key is still the last part of the param."""
    assert refusal(ResponsesRequest, {"model": "tiny", "input": [5]}).param == "input[0]"
    missing = refusal(ChatCompletionRequest, {**CHAT, "tools": [{"type": "function", "function": {"name": "f"}}],
                                              "tool_choice": {"type": "function"}})
    assert (missing.param, missing.code) == ("tool_choice.function", "missing_required_parameter")
    assert refusal(ResponsesRequest, {"input": "x"}).param == "model"
