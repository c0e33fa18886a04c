"""Legacy completions `logprobs` (QA74 findings 2, 3, 4, 6): an upstream's `bytes:\\xNN`
token names count as their bytes in `text_offset`; its null log probabilities stay null;
litellm's streamed text completions, which drop `logprobs`, refuse them; every scored
token is a key of its own `top_logprobs` (up to logprobs + 1 keys, as OpenAI and vLLM)."""
import pytest

from gateway.backend import TokenChoice
from gateway.errors import ApiError
from gateway.legacy_logprobs import StreamedLogprobs, completion_logprobs
from gateway.model_configs import UpstreamModelConfig
from gateway.upstream_kwargs import call_kwargs
from gateway.upstream_replies import events_from_response


def _upstream_reply(text: str, logprobs: dict) -> dict:
    return {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": "length",
                                                      "logprobs": logprobs}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}


def test_an_upstreams_byte_tokens_count_as_their_bytes_in_text_offset():
    """Known answer: "a😀bc" echoed, the emoji (f0 9f 98 80) in two byte tokens named as
    OpenAI and vLLM name them; a model's own answer is [0, 1, 1, 2, 3] (api.md: the index
    of the character a token's first byte belongs to)."""
    text = "a\U0001F600bc"
    tokens = ["a", "bytes:\\xf0\\x9f", "bytes:\\x98\\x80", "b", "c"]
    reply = _upstream_reply(text, {"tokens": tokens, "token_logprobs": [None, -1.0, -0.5, -2.0, -0.25],
                                   "top_logprobs": [None, {"bytes:\\xf0\\x9f": -1.0}, {"bytes:\\x98\\x80": -0.5},
                                                    {"b": -2.0}, {"c": -0.25, "bytes:\\xe4": -3.0}],
                                   "text_offset": [0, 1, 1, 2, 3]})
    [delta, _] = events_from_response(reply, False, 3)
    assert b"".join(c.token_bytes for c in delta.logprobs) == text.encode()
    whole = completion_logprobs(delta.logprobs, text_length=len(delta.text))
    assert whole["text_offset"] == [0, 1, 1, 2, 3]
    assert whole["tokens"] == tokens   # the names go back out as they came
    assert whole["top_logprobs"][4] == {"c": -0.25, "bytes:\\xe4": -3.0}
    streamed = StreamedLogprobs()
    pieces = [streamed.chunk("a", delta.logprobs[:1]), streamed.chunk("", delta.logprobs[1:2]),
              streamed.chunk("\U0001F600", delta.logprobs[2:3]), streamed.chunk("bc", delta.logprobs[3:]),
              streamed.rest()]
    assert [o for piece in pieces if piece for o in piece["text_offset"]] == [0, 1, 1, 2, 3]


def test_a_bytes_name_is_bytes_only_when_they_are_not_whole_utf8():
    from gateway.upstream_usage import legacy_named
    assert legacy_named("bytes:\\xf0\\x9f") == ("\ufffd", b"\xf0\x9f")
    assert legacy_named("bytes:\\x41") == ("bytes:\\x41", b"bytes:\\x41")   # whole UTF-8: a text
    assert legacy_named("bytes:\\xzz") == ("bytes:\\xzz", b"bytes:\\xzz")
    assert legacy_named("bytes:") == ("bytes:", b"bytes:")


def test_an_upstreams_null_logprobs_stay_null_never_zero():
    reply = _upstream_reply("Hey you", {"tokens": ["Hey", " you"], "token_logprobs": [None, -1.5],
                                        "top_logprobs": [None, {" you": -1.5, " me": -2.0}]})
    [delta, _] = events_from_response(reply, False, 3)
    whole = completion_logprobs(delta.logprobs, text_length=len(delta.text))
    assert whole["token_logprobs"] == [None, -1.5]
    assert whole["top_logprobs"] == [None, {" you": -1.5, " me": -2.0}]
    missing = _upstream_reply("Hey you", {"tokens": ["Hey", " you"]})
    [delta, _] = events_from_response(missing, False, 3)
    assert completion_logprobs(delta.logprobs)["token_logprobs"] == [None, None]   # not made-up zeros


def test_litellm_streamed_completions_refuse_logprobs_passthrough_and_chat_do_not():
    lite = UpstreamModelConfig(name="lite", litellm_model="openai/tiny", api_base="http://127.0.0.1:9/v1")
    passthrough = UpstreamModelConfig(name="pass", litellm_model="openai/tiny", api_base="http://127.0.0.1:9/v1",
                                      passthrough=True)
    body = {"model": "lite", "prompt": "hi", "logprobs": 0, "stream": True}
    with pytest.raises(ApiError) as caught:
        call_kwargs(lite, body, stream=True)
    assert (caught.value.status, caught.value.param, caught.value.code) == (400, "logprobs", "unsupported_parameter")
    assert call_kwargs(lite, dict(body, stream=False), stream=False)["logprobs"] == 0
    assert call_kwargs(passthrough, body, stream=True)["logprobs"] == 0
    assert "logprobs" not in call_kwargs(lite, {"model": "lite", "prompt": "hi", "stream": True}, stream=True)
    chat = {"model": "lite", "messages": [{"role": "user", "content": "hi"}], "logprobs": True, "stream": True}
    assert call_kwargs(lite, chat, stream=True)["logprobs"] is True   # litellm's chat stream keeps them


def test_top_logprobs_always_hold_the_scored_token():
    """OpenAI: "the logprob of the sampled token, so there may be up to logprobs+1
    elements"; `logprobs: 0` gives the token alone; an echoed first token stays null."""
    choices = [TokenChoice("Hi", b"Hi", None),
               TokenChoice(" there", b" there", -3.0, top=((" you", b" you", -0.5), (" all", b" all", -1.0))),
               TokenChoice("!", b"!", -0.1, top=(("!", b"!", -0.1), (".", b".", -2.5))),
               TokenChoice("\ufffd", b"\xf0", -4.0)]   # logprobs: 0
    whole = completion_logprobs(choices)
    assert whole["top_logprobs"] == [None, {" you": -0.5, " all": -1.0, " there": -3.0},
                                     {"!": -0.1, ".": -2.5}, {"bytes:\\xf0": -4.0}]
    streamed = StreamedLogprobs().chunk("Hi there!\ufffd", choices)
    assert streamed["top_logprobs"] == whole["top_logprobs"]


def test_an_upstreams_empty_reply_keeps_its_empty_logprobs_not_null():
    # QA86: a reply whose first token ended it came back with `logprobs: null` from upstream models
    completion = {"choices": [{"index": 0, "text": "", "finish_reason": "stop", "logprobs": {
        "tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    [delta, _] = events_from_response(completion, False, 3)
    assert (delta.text, delta.logprobs) == ("", [])
    chat = {"choices": [{"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "stop",
                         "logprobs": {"content": [], "refusal": None}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    [delta, _] = events_from_response(chat, True, 3)
    assert (delta.text, delta.logprobs) == ("", [])
    unasked = {**completion, "choices": [{**completion["choices"][0], "logprobs": None}]}
    assert len(events_from_response(unasked, False, 3)) == 1   # nothing asked, nothing sent: the finish alone
