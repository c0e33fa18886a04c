"""`logit_bias` keys (QA230 F2): a key is a token id written in decimal digits (OpenAI's
docs say only "token ID"; "021285" is token 21285, as vLLM's `int(key)` reads it), and two
keys naming one token are a 400 naming `logit_bias` on chat and completions, for every
model: the engine adds biases with an indexed `+=`, which keeps one of two biases for one
id, so one would be silently dropped. A key that is no such id ("+5", " 5", "5.0", "-1")
is a 400 naming it under `logit_bias`, never a 500."""
from __future__ import annotations

import httpx
import pytest

from gateway.errors import ApiError
from gateway.local_sampling import logit_bias_pairs
from gateway.schemas import ChatCompletionRequest, CompletionRequest, validate

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
COMPLETION = {"model": "tiny", "prompt": "Hi", "max_tokens": 2}
BODIES = [(ChatCompletionRequest, CHAT, "/v1/chat/completions"), (CompletionRequest, COMPLETION, "/v1/completions")]
TWICE = [{"97": 100, "097": -100}, {"097": -100, "97": 100}, {"0": 1, "00": 1}, {"5": 1, "6": 1, "0006": 2}]


@pytest.mark.parametrize("logit_bias", TWICE)
@pytest.mark.parametrize("model_cls, body, path", BODIES)
def test_two_keys_naming_one_token_are_a_400_naming_logit_bias(model_cls, body, path, logit_bias):
    with pytest.raises(ApiError) as refused:
        validate(model_cls, {**body, "logit_bias": logit_bias})
    error = refused.value
    assert (error.status, error.param, error.code) == (400, "logit_bias", "invalid_value")
    assert "both name token" in error.message


@pytest.mark.parametrize("key", ["+5", " 5", "5 ", "5.0", "-1", "1e3", "", "0x5", "٥", "5\n", "1" * 13])
@pytest.mark.parametrize("model_cls, body, path", BODIES)
def test_a_key_that_is_no_decimal_token_id_is_a_400_naming_logit_bias(model_cls, body, path, key):
    with pytest.raises(ApiError) as refused:
        validate(model_cls, {**body, "logit_bias": {key: 1}})
    assert refused.value.status == 400 and refused.value.param.startswith("logit_bias")


class Vocab:
    def __len__(self) -> int:
        return 259


@pytest.mark.parametrize("model_cls, body, path", BODIES)
def test_distinct_tokens_each_keep_their_bias(model_cls, body, path):
    request = validate(model_cls, {**body, "logit_bias": {"97": 5, "0098": -5, "0": 1}})
    assert logit_bias_pairs(request, Vocab()) == ((0, 1.0), (97, 5.0), (98, -5.0))


@pytest.mark.parametrize("model", ["tiny", "mock"])
@pytest.mark.parametrize("model_cls, body, path", BODIES)
def test_the_gateway_answers_a_token_named_twice_with_the_400(gateway, model_cls, body, path, model):
    for logit_bias, status in (({"97": 100, "097": -100}, 400), ({"097": 100}, 200), ({"+97": 100}, 400)):
        reply = httpx.post(f"{gateway.base_url}{path}", json={**body, "model": model, "logit_bias": logit_bias},
                           headers=gateway.headers("alpha"), timeout=60)
        assert reply.status_code == status, reply.text
        if status == 400:
            assert reply.json()["error"]["param"].startswith("logit_bias"), reply.text
