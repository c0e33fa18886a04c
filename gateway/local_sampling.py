"""A local request's sampling parameters and completion budget, from its OpenAI fields.

Invariants: a token id in `logit_bias` past the vocabulary, a non-boolean `ignore_eos`,
and a prompt with no room left for the completion (or less room than `max_tokens` asks)
are 400s naming the field, before any work is queued; so is an echo-only prompt
(`echo` with `max_tokens` 0) of the context's length or more, with the reason it is one:
the engine runs it one position past the prompt, as it admits only prompts shorter than
the context (shards/worker.py), never "you requested N tokens" of an N-token context.
"""
from __future__ import annotations

from gateway.errors import ApiError, context_length_exceeded, invalid_request
from gateway.schemas import ChatCompletionRequest, CompletionRequest


def sampling_params(request: ChatCompletionRequest | CompletionRequest, tokenizer, *, max_tokens: int,
                    stop: list[str], logprobs: int | None = None):
    """The engine's `SamplingParams` for `request`. NOTE: `ignore_eos` is vLLM's extension
    field (benchmarks and replay use it)."""
    from shards.protocol import SamplingParams
    ignore_eos = (request.model_extra or {}).get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise invalid_request("'ignore_eos' must be a boolean.", param="ignore_eos")
    return SamplingParams(max_tokens=max_tokens,
                          presence_penalty=request.presence_penalty or 0.0,
                          frequency_penalty=request.frequency_penalty or 0.0,
                          logit_bias=logit_bias_pairs(request, tokenizer),
                          temperature=1.0 if request.temperature is None else request.temperature,
                          top_p=1.0 if request.top_p is None else request.top_p,
                          seed=request.seed, stop=tuple(stop), ignore_eos=ignore_eos,
                          logprobs=logprobs)


def completion_budget(num_prompt_tokens: int, num_max_tokens: int | None, max_context_tokens: int, *,
                      param: str = "messages", budget_param: str = "max_tokens") -> int:
    """The completion budget: `num_max_tokens`, or all the room the context leaves; raises
    `context_length_exceeded` when it cannot fit, naming `param` (the prompt), or
    `budget_param` (the field `num_max_tokens` came from) when that alone fills the context."""
    room = max_context_tokens - num_prompt_tokens
    if room <= 0 or (num_max_tokens is not None and num_max_tokens > room):
        raise context_length_exceeded(num_prompt_tokens, num_max_tokens, max_context_tokens, param=param,
                                      budget_param=budget_param)
    return num_max_tokens if num_max_tokens is not None else room


def refuse_echo_only_past_context(num_prompt_tokens: int, max_context_tokens: int, *, param: str = "prompt") -> None:
    """The 400 for an echo-only prompt (`echo`, `max_tokens` 0) that leaves the engine no
    position to run it to (the module docstring); nothing when it has one."""
    if num_prompt_tokens < max_context_tokens:
        return
    raise ApiError(
        400, f"This model's maximum context length is {max_context_tokens} tokens. However, your {param} "
        f"resulted in {num_prompt_tokens} tokens: 'echo' with 'max_tokens' 0 scores the {param} by running the "
        f"model one position past it, so the {param} can have at most {max_context_tokens - 1} tokens. Please "
        f"reduce the length of the {param}.",
        "invalid_request_error", "context_length_exceeded", param, num_prompt_tokens=num_prompt_tokens)


def logit_bias_pairs(request: ChatCompletionRequest | CompletionRequest, tokenizer) -> tuple:
    """`logit_bias` as (token id, bias) pairs; a token id past the vocabulary is a 400."""
    pairs = tuple(sorted((int(token), bias) for token, bias in (request.logit_bias or {}).items()))
    vocab_size = len(tokenizer) if pairs else 0
    bad = next((token for token, _ in pairs if token >= vocab_size), None)
    if bad is not None:
        raise invalid_request(f"Token id {bad} in logit_bias is outside the vocabulary (size {vocab_size}).",
                              param="logit_bias")
    return pairs
