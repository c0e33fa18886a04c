"""The legacy `/v1/completions` side of a local model (`gateway.local.LocalBackend`, of
which `LocalCompletions` is a part): its prompts (a text, token ids, or a list of
either) checked and tokenized, one `LocalCall` each.

Invariants: every token id is inside the vocabulary and every prompt leaves room for at
least one completion token (`completion_budget`) before anything is admitted (`max_tokens`
0 too: with `echo`, the prompt alone, run for one token that is dropped, `LocalCall.echo_only`,
so a prompt of the context's length is a 400 saying so; without, a 400, as nothing would be
returned), a text
prompt whose length alone proves it past the context before it is tokenized
(gateway/prompt_bounds.py, the same 400); text
prompts are tokenized off the event loop, through the tenant's prompt token cache; at
most `MAX_RUNS` completions (prompts x max(n, best_of)) run for one request.
It uses the backend's `engine`, `prompt_tokens` and `_prepared`.
"""
from __future__ import annotations

import asyncio
import dataclasses

from gateway.backend import Prepared
from gateway.errors import invalid_request
from gateway.local_generation import LocalCall
from gateway.local_refusals import refuse_unsupported_completion_params
from gateway.local_sampling import completion_budget, refuse_echo_only_past_context, sampling_params
from gateway.schemas import CompletionRequest

MAX_RUNS = 128  # completions generated for one request: prompts x max(n, best_of)


class LocalCompletions:
    __slots__ = ()

    async def prepare_completion(self, request: CompletionRequest, tenant: str,
                                 request_id: str) -> Prepared:
        refuse_unsupported_completion_params(request)
        if request.suffix:
            raise invalid_request("'suffix' is not supported by local models.",
                                  param="suffix", code="unsupported_parameter")
        if request.max_tokens == 0 and not request.echo:
            raise invalid_request("Invalid 'max_tokens': 0 generates nothing, which is served only with 'echo': true "
                                  "(the prompt returned, with its logprobs when asked). Set 'max_tokens' to 1 or "
                                  "more, or 'echo' to true.", param="max_tokens", code="integer_below_min_value")
        best_of = request.best_of or 1
        if best_of > 1 and request.stream:
            raise invalid_request("best_of cannot be used with stream: the best completions are known "
                                  "only once every candidate is done.", param="best_of")
        if request.best_of is not None and best_of < (request.n or 1):   # best_of 1 with n 3 too
            raise invalid_request(f"best_of ({best_of}) must be at least n ({request.n}).", param="best_of")
        prompts = request.prompt
        if not (isinstance(prompts, list) and prompts and isinstance(prompts[0], (str, list))):
            prompts = [prompts]
        per_prompt = max(request.n or 1, best_of)
        if len(prompts) * per_prompt > MAX_RUNS:
            raise invalid_request(f"{len(prompts)} prompts x {per_prompt} choices each is more than "
                                  f"{MAX_RUNS} completions in one request.", param="prompt")
        for prompt in prompts:   # NOTE: before tokenizing: megabytes of text cost seconds and gigabytes (QA134 H0)
            if isinstance(prompt, str):
                self.prompt_tokens.bound.refuse_past_context(prompt, request.max_tokens,
                                                             self.engine.max_context_tokens, param="prompt")
        if any(isinstance(prompt, str) and prompt for prompt in prompts):   # NOTE: off the event loop
            texts_ids = await asyncio.to_thread(self._text_prompt_ids, tenant, prompts)
        else:
            texts_ids = [None] * len(prompts)
        calls = [self._completion_call(request, prompt, text_ids, best_of)
                 for prompt, text_ids in zip(prompts, texts_ids)]
        prepared = self._prepared(request_id, tenant, request.max_tokens, calls[0])
        if len(calls) > 1:
            num_prompt = sum(len(call.prompt_token_ids) for call in calls)
            prepared = dataclasses.replace(
                prepared, payload=calls, num_prompts=len(calls), num_prompt_tokens=num_prompt, prompt_token_ids=None,
                num_reserved_tokens=prepared.num_reserved_tokens - prepared.num_prompt_tokens + num_prompt)
        if best_of == 1:
            return prepared
        return dataclasses.replace(prepared, best_of=best_of, keep_logprobs=request.logprobs is not None)

    def _text_prompt_ids(self, tenant: str, prompts: list) -> list[list[int] | None]:
        """The ids of each non-empty text prompt (None for the others), as the tokenizer's
        `encode` gives them, through the prompt token cache (an agent's next prompt repeats
        its last one)."""
        return [self.prompt_tokens.encode(tenant, prompt, add_special_tokens=True)
                if isinstance(prompt, str) and prompt else None for prompt in prompts]

    def _completion_call(self, request: CompletionRequest, prompt: str | list[int], text_ids: list[int] | None,
                         best_of: int) -> LocalCall:
        """One prompt of a completions request, checked; `text_ids` are a text prompt's ids."""
        tokenizer = self.engine.tokenizer
        if isinstance(prompt, str):
            if not prompt:
                raise invalid_request("The prompt is empty.", param="prompt")
            prompt_ids = text_ids
        else:
            prompt_ids = list(prompt)
            vocab_size = len(tokenizer)
            bad = next((t for t in prompt_ids if not 0 <= t < vocab_size), None)
            if bad is not None:
                raise invalid_request(f"Token id {bad} is outside the vocabulary "
                                      f"(size {vocab_size}).", param="prompt")
        if not prompt_ids:
            raise invalid_request("The prompt is empty.", param="prompt")
        echo_only = request.max_tokens == 0   # with `echo` (without: refused above)
        if echo_only:   # run for one token: the prompt must leave it a position
            refuse_echo_only_past_context(len(prompt_ids), self.engine.max_context_tokens, param="prompt")
        budget = completion_budget(len(prompt_ids), request.max_tokens, self.engine.max_context_tokens,
                                   param="prompt")
        return LocalCall(prompt_token_ids=prompt_ids,
                         sampling=dataclasses.replace(
                             sampling_params(request, self.engine.tokenizer, max_tokens=max(budget, 1),
                                             stop=request.stop_list(),
                                             logprobs=request.logprobs if best_of == 1 else request.logprobs or 0),
                             prompt_logprobs=request.logprobs if request.echo else None),
                         session=None, tool_names=None, forced=None, keep_one_call=False,
                         flex=request.service_tier == "flex",
                         echo_text=(prompt if isinstance(prompt, str) else tokenizer.decode(prompt_ids))
                         if request.echo else None, echo_only=echo_only)
