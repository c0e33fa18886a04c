"""An echo-only completion (`echo: true, max_tokens: 0`) is run for one token that is
dropped, and the engine admits only prompts shorter than the context: a prompt of the
context's length is a 400 that says so (QA176 F3: it said "maximum context length is 8192
... you requested 8192 tokens"), one a token shorter is served as an echo-only call, and
`max_tokens` 1 keeps the ordinary message."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from gateway.errors import ApiError
from gateway.local_completions import LocalCompletions
from gateway.schemas import CompletionRequest, validate

CONTEXT = 8


class _Tokenizer:
    def __len__(self) -> int:
        return 100

    def decode(self, ids: list[int]) -> str:
        return " ".join(map(str, ids))


def _call(num_prompt_tokens: int, max_tokens: int):
    backend = SimpleNamespace(engine=SimpleNamespace(tokenizer=_Tokenizer(), max_context_tokens=CONTEXT))
    prompt = [5] * num_prompt_tokens
    request = validate(CompletionRequest, {"model": "tiny", "prompt": prompt, "echo": True, "max_tokens": max_tokens})
    return LocalCompletions._completion_call(backend, request, prompt, None, 1)


def test_an_echo_only_prompt_of_the_contexts_length_is_refused_for_the_real_reason():
    with pytest.raises(ApiError) as refused:
        _call(CONTEXT, 0)
    error = refused.value
    assert (error.status, error.code, error.param, error.num_prompt_tokens) == (
        400, "context_length_exceeded", "prompt", CONTEXT)
    assert f"requested {CONTEXT} tokens" not in error.message
    assert error.message == (
        f"This model's maximum context length is {CONTEXT} tokens. However, your prompt resulted in {CONTEXT} "
        "tokens: 'echo' with 'max_tokens' 0 scores the prompt by running the model one position past it, so the "
        f"prompt can have at most {CONTEXT - 1} tokens. Please reduce the length of the prompt.")


def test_an_echo_only_prompt_past_the_context_says_the_same():
    with pytest.raises(ApiError) as refused:
        _call(CONTEXT + 3, 0)
    assert f"at most {CONTEXT - 1} tokens" in refused.value.message


def test_an_echo_only_prompt_one_token_shorter_is_run_for_the_one_dropped_token():
    call = _call(CONTEXT - 1, 0)
    assert call.echo_only and call.sampling.max_tokens == 1


def test_max_tokens_1_at_the_context_keeps_the_ordinary_message():
    with pytest.raises(ApiError) as refused:
        _call(CONTEXT, 1)
    assert f"you requested {CONTEXT + 1} tokens ({CONTEXT} in the prompt, 1 in the completion)" in \
        refused.value.message
