"""The request wire models: nullable `stream`, typed hints a local model ignores (that they
still reach upstream models as sent: test_upstream_kwargs.py), and assistant refusals."""

import pytest

from gateway.errors import ApiError
from gateway.schemas import ChatCompletionRequest, CompletionRequest, validate

USER = {"role": "user", "content": "Hi"}
HINTS = {"store": True, "reasoning_effort": "a-future-effort", "prompt_cache_key": "k-1",
         "safety_identifier": "user-hash", "prediction": {"type": "content", "content": [{"type": "text", "text": "x"}]}}


def chat(**fields) -> ChatCompletionRequest:
    return validate(ChatCompletionRequest, {"model": "m", "messages": [USER], **fields})


def refused(body: dict, model_cls=ChatCompletionRequest) -> ApiError:
    with pytest.raises(ApiError) as caught:
        validate(model_cls, {"model": "m", **body})
    assert caught.value.status == 400
    return caught.value


def test_a_null_stream_is_false_on_both_endpoints():
    assert chat(stream=None).stream is False
    assert validate(CompletionRequest, {"model": "m", "prompt": "Hi", "stream": None}).stream is False
    # stream_options still needs stream true
    error = refused({"messages": [USER], "stream": None, "stream_options": {"include_usage": True}})
    assert error.param == "stream_options"


@pytest.mark.parametrize("param, value", [
    ("store", "x"), ("reasoning_effort", 5), ("verbosity", "bogus"), ("prompt_cache_key", 5),
    ("safety_identifier", 5), ("prediction", "x"), ("prediction", {"type": "content", "content": 5}),
    ("prediction", {"type": "other", "content": "x"}),
    ("prediction", {"type": "content", "content": [{"type": "image_url", "image_url": {"url": "u"}}]})])
def test_a_wrong_typed_hint_is_a_400_naming_it(param, value):
    assert refused({"messages": [USER], param: value}).param.split(".")[0] == param


def test_well_typed_hints_and_null_ones_are_accepted():
    request = chat(verbosity="low", **HINTS)
    assert request.reasoning_effort == "a-future-effort"   # any name: new efforts appear
    assert chat(prediction={"type": "content", "content": "x"}).prediction.content == "x"
    chat(**{name: None for name in (*HINTS, "verbosity")})


def test_an_assistant_message_may_be_its_refusal():
    refusal = {"role": "assistant", "content": None, "refusal": "I can't."}
    assert chat(messages=[USER, refusal, USER]).messages[1].refusal == "I can't."
    assert refused({"messages": [USER, {**refusal, "refusal": 5}]}).param == "messages[1].refusal"
    assert refused({"messages": [USER, {"role": "assistant", "content": None}]}).param == "messages[1]"


def test_refusal_parts_are_an_assistants_only_and_need_their_text():
    part = {"type": "refusal", "refusal": "I can't."}
    chat(messages=[USER, {"role": "assistant", "content": [part, {"type": "text", "text": "Ask me else."}]}])
    error = refused({"messages": [USER, {"role": "assistant", "content": [{"type": "refusal", "refusal": 5}]}]})
    assert error.param == "messages[1]" and "string 'refusal'" in error.message
    error = refused({"messages": [USER, {"role": "assistant", "content": "ok"}, {"role": "user", "content": [part]}]})
    assert error.param == "messages[2]" and "user message" in error.message
