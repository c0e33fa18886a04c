"""OpenAI chat (and legacy completions) parameters local models cannot honour, refused by name.

The chat schema accepts fields it does not know (clients send many), and most unknown
ones are hints a local model may ignore without changing the answer (`service_tier`,
`store`, `prompt_cache_key`, `reasoning_effort` for a model that does not reason, ...).
The ones below would change what the client gets: `audio` output or web search would
silently not happen, and an earlier assistant message's `audio` reference is something the
chat template cannot render, so the model would never see that turn's answer (legacy
function calling is refused for every model: `chat_checks`). So would the other text
endpoint's own parameters, which a client that mixes up the two APIs (or moves from vLLM,
whose chat takes `echo`) expects to work: chat's `top_logprobs`, `tools`, ... on legacy
completions, completions' `echo`, `best_of`, `suffix` on chat (`OTHER_ENDPOINT`).
Invariant: each is a 400 `unsupported_parameter` naming it (`messages[i].audio`), before
any work is queued; a null one (SDKs send them so) is no reference and is accepted, as is
one at the value that changes nothing (`echo: false`, `best_of: 1`). Upstream models get
them as sent. Content parts that are not text are a 400 `unsupported_content`
(`template_messages`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gateway.errors import invalid_request
from gateway.schemas import ChatCompletionRequest, CompletionRequest, refuse_extras

REFUSED = {
    "audio": "Local models reply in text only: 'audio' output is not supported.",
    "web_search_options": "Local models cannot search the web: 'web_search_options' is not supported.",
}


# vLLM's sampling extensions (clients written for vLLM send them as extra fields): a local
# model does not run them, and each would change the answer, so one set to anything but its
# value that changes nothing (listed; a null is always fine) is refused (QA171: `top_k: 1`
# was a 200 that still sampled). Upstream models get them as sent.
VLLM_SAMPLING_NO_OPS = {
    "top_k": (-1, 0), "min_p": (0,), "repetition_penalty": (1,), "min_tokens": (0,),
    "use_beam_search": (False,), "length_penalty": (1,), "include_stop_str_in_output": (False,),
    "skip_special_tokens": (True,), "spaces_between_special_tokens": (True,), "stop_token_ids": ([],),
    "bad_words": ([],), "allowed_token_ids": (), "prompt_logprobs": (), "truncate_prompt_tokens": (),
    "guided_json": (), "guided_regex": (), "guided_choice": (), "guided_grammar": (),
}


def changes_nothing(value: Any, no_ops: tuple) -> bool:
    """Whether an extra field's `value` is null or one of its `no_ops` (1.0 is 1; true is not 1)."""
    return value is None or any(value == no_op and isinstance(value, bool) == isinstance(no_op, bool)
                                for no_op in no_ops)


def leave_it_out(no_ops: tuple) -> str:
    return "Leave it out" + (f" or set it to {json.dumps(no_ops[0])}." if no_ops else ".")


def refuse_vllm_sampling_extensions(request: ChatCompletionRequest | CompletionRequest) -> None:
    """A 400 `unsupported_parameter` naming the first vLLM sampling extension set to a value
    that would change the answer (`VLLM_SAMPLING_NO_OPS`)."""
    extra = request.model_extra or {}
    for name, no_ops in VLLM_SAMPLING_NO_OPS.items():
        if not changes_nothing(extra.get(name), no_ops):
            raise invalid_request(f"Local models do not support vLLM's '{name}'; it would be ignored. "
                                  + leave_it_out(no_ops), param=name, code="unsupported_parameter")


@dataclass(frozen=True, slots=True)
class OtherEndpointParam:
    """A parameter of the other text endpoint: what this endpoint takes instead, or why it
    has none (`instead`), and the values that change nothing (`no_ops`; a null always does)."""
    instead: str
    no_ops: tuple = ()


CHAT = "a chat completions parameter (/v1/chat/completions)"
LEGACY = "a legacy completions parameter (/v1/completions)"
# the other endpoint's parameters, by the endpoint they were sent to: ignored, each would
# change the answer (QA230 F3: chat `echo: true` was a 200 without the echo)
OTHER_ENDPOINT = {
    "completions": (CHAT, {
        "max_completion_tokens": OtherEndpointParam("legacy completions take 'max_tokens'."),
        "top_logprobs": OtherEndpointParam("legacy completions take 'logprobs': N, the N likeliest tokens at each "
                                           "position (at most 5)."),
        "messages": OtherEndpointParam("legacy completions take a 'prompt'."),
        "tools": OtherEndpointParam("legacy completions call no tools."),
        "tool_choice": OtherEndpointParam("legacy completions call no tools.", ("none",)),
        "response_format": OtherEndpointParam("legacy completions reply in free text.", ({"type": "text"},)),
    }),
    "chat": (LEGACY, {
        "echo": OtherEndpointParam("a chat reply never repeats the messages (local models do not run vLLM's chat "
                                   "'echo').", (False,)),
        "best_of": OtherEndpointParam("chat generates its 'n' choices and ranks none.", (1,)),
        "suffix": OtherEndpointParam("chat takes none (and local models serve none on /v1/completions either)."),
    }),
}


def refuse_other_endpoint_params(request: ChatCompletionRequest | CompletionRequest, endpoint: str) -> None:
    """A 400 `unsupported_parameter` naming the first of the other endpoint's parameters
    (`OTHER_ENDPOINT[endpoint]`) sent to `endpoint` ("chat" or "completions") at a value
    that would change the answer, saying which endpoint takes it and what to send instead."""
    kind, params = OTHER_ENDPOINT[endpoint]
    extra = request.model_extra or {}
    for name, param in params.items():
        if not changes_nothing(extra.get(name), param.no_ops):
            raise invalid_request(f"'{name}' is {kind}: {param.instead} " + leave_it_out(param.no_ops),
                                  param=name, code="unsupported_parameter")


TEXT_PART_TYPES = ("text", "input_text", "output_text", "refusal")   # a refusal part is an assistant's text


def template_messages(request: ChatCompletionRequest) -> list[dict]:
    """The request's messages as the chat template takes them (`developer` as `system`);
    a content part that is not text (an image, audio, a file) is a 400
    `unsupported_content` naming it: local models read text only."""
    messages = []
    for index, message in enumerate(request.messages):
        item = message.model_dump(exclude_none=True)
        if isinstance(message.content, list):
            for part in message.content:
                if part.get("type") not in TEXT_PART_TYPES:
                    raise invalid_request(f"This model accepts text only; content part type "
                                          f"'{part.get('type')}' is not supported.",
                                          param=f"messages[{index}].content", code="unsupported_content")
        if item["role"] == "developer":
            item["role"] = "system"
        messages.append(item)
    return messages


def refuse_unsupported_completion_params(request: CompletionRequest) -> None:
    """Legacy completions' own refusals: chat's parameters that would be ignored (a
    `max_completion_tokens` reply would run to the default 16 tokens), and vLLM's sampling
    extensions."""
    refuse_other_endpoint_params(request, "completions")
    refuse_vllm_sampling_extensions(request)


HISTORY_AUDIO = ("An assistant message's 'audio' is not supported by local models: they read text only. Send what "
                 "the audio said as the message's 'content'.")


def refuse_legacy_message_fields(request: ChatCompletionRequest) -> None:
    """A 400 naming the first assistant message's `audio` that is set (a legacy
    `function_call` is refused for every model: `chat_checks.refuse_legacy_function_calling`)."""
    for index, message in enumerate(request.messages):
        if message.role == "assistant" and message.sets("audio"):
            raise invalid_request(HISTORY_AUDIO, param=f"messages[{index}].audio", code="unsupported_parameter")


def refuse_unsupported_chat_params(request: ChatCompletionRequest) -> None:
    refuse_extras(request, REFUSED)
    refuse_other_endpoint_params(request, "chat")
    refuse_vllm_sampling_extensions(request)
    refuse_legacy_message_fields(request)
    modalities = (request.model_extra or {}).get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise invalid_request("Local models reply in text only: 'modalities' must be [\"text\"].",
                              param="modalities", code="unsupported_parameter")
