"""vLLM's sampling extensions sent to a local model: refused by name unless at a value that
changes nothing (QA171: `top_k: 1` was a 200 that still sampled; docs/api.md says a
parameter that cannot be honoured is never silently ignored)."""
from __future__ import annotations

import httpx
import pytest

from gateway.errors import ApiError
from gateway.local_refusals import refuse_unsupported_chat_params, refuse_unsupported_completion_params
from gateway.schemas import ChatCompletionRequest, CompletionRequest, validate
from tests.conftest import TINY_GATEWAY_KEYS

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]}
COMPLETION = {"model": "tiny", "prompt": "Hi"}


@pytest.mark.parametrize("name, value", [("top_k", 1), ("min_p", 0.1), ("repetition_penalty", 1.2),
                                         ("min_tokens", 4), ("use_beam_search", True), ("guided_json", {}),
                                         ("include_stop_str_in_output", True), ("prompt_logprobs", 1),
                                         ("skip_special_tokens", False), ("stop_token_ids", [2]),
                                         ("top_k", True)])   # true is no -1 or 0
def test_an_extension_that_would_change_the_answer_is_a_400_naming_it(name, value):
    for refuse, model_cls, body in ((refuse_unsupported_chat_params, ChatCompletionRequest, CHAT),
                                    (refuse_unsupported_completion_params, CompletionRequest, COMPLETION)):
        with pytest.raises(ApiError) as refused:
            refuse(validate(model_cls, {**body, name: value}))
        assert (refused.value.status, refused.value.param, refused.value.code) == (400, name, "unsupported_parameter")
        assert f"'{name}'" in refused.value.message


@pytest.mark.parametrize("extras", [{"top_k": -1}, {"top_k": 0}, {"min_p": 0.0}, {"repetition_penalty": 1},
                                    {"repetition_penalty": 1.0}, {"min_tokens": 0}, {"use_beam_search": False},
                                    {"skip_special_tokens": True}, {"stop_token_ids": []}, {"top_k": None},
                                    {"guided_json": None}, {"ignore_eos": True}, {"my_vendor_flag": 3}])
def test_their_no_op_values_nulls_and_other_extras_are_served(extras):
    refuse_unsupported_chat_params(validate(ChatCompletionRequest, {**CHAT, **extras}))
    refuse_unsupported_completion_params(validate(CompletionRequest, {**COMPLETION, **extras}))


def test_a_served_local_model_answers_top_k_with_the_400(tiny_gateway):
    headers = {"Authorization": f"Bearer {TINY_GATEWAY_KEYS['tenant0']}"}
    for path, body in (("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)):
        reply = httpx.post(f"{tiny_gateway.base_url}{path}", json={**body, "max_tokens": 2, "top_k": 1},
                           headers=headers, timeout=60)
        assert reply.status_code == 400 and reply.json()["error"]["param"] == "top_k", reply.text
