"""An upstream's finish reason in OpenAI's words, on both upstream paths alike.

OpenAI's APIs name why a choice ended with one of `OPENAI_FINISH_REASONS`; other servers
behind an OpenAI-compatible `api_base` send their own names too ("eos", "eos_token",
"end_turn", "max_tokens", "tool_use", "SAFETY", "recitation", ...). The passthrough path
(gateway/passthrough.py) reads the upstream's JSON itself. litellm maps every reason to
OpenAI's set before the gateway reads it, case-sensitively ("SAFETY" is "content_filter",
"recitation" "stop"): where it says "stop", its name for a reason it does not know, the
reason the provider sent is read where litellm keeps it (`sent_finish_reason`, and
gateway/upstream_replies.py `StreamEnd` for a chat stream's raw chunks) and mapped here.
Both backends pass each choice's `Finished` through `in_openai_words`.

Invariants: `openai_finish_reason` returns one of `OPENAI_FINISH_REASONS`; a reason in that
set is kept as sent; another (case aside) becomes the OpenAI reason of the same meaning
(`OTHER_NAMES`: every name litellm maps to something other than "stop", in any case, and
a few more), any other one "stop", as litellm maps it. A reason litellm gave other than
"stop" is kept (its "tool_calls" for a stream that called tools and ended with "stop"
too). It is pure and cheap (a set and a dict look-up): it runs once per choice, on the
hot path; `sent_finish_reason` parses JSON only for a litellm text completion's "stop".
"""
from __future__ import annotations

import json
from typing import Any

from gateway.backend import ChatEvent, Finished
from gateway.upstream_usage import field_of

# `function_call`: the chat API's deprecated `functions` end so
OPENAI_FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})

# providers' names (lower case) for an end that is not a plain stop
OTHER_NAMES = {
    # the output limit or the context ran out
    "max_tokens": "length", "model_context_window_exceeded": "length", "continuation": "length",
    "pause_turn": "length", "compaction": "length",
    # the model called tools
    "tool_use": "tool_calls", "tool_call": "tool_calls",
    # a safety system held the output back
    "content_filtered": "content_filter", "refusal": "content_filter", "safety": "content_filter",
    "recitation": "content_filter", "blocklist": "content_filter", "prohibited_content": "content_filter",
    "spii": "content_filter", "language": "content_filter", "sensitive": "content_filter",
    "guardrail_intervened": "content_filter", "image_safety": "content_filter",
    "image_prohibited_content": "content_filter", "image_recitation": "content_filter",
    "image_other": "content_filter", "no_image": "content_filter", "error_toxic": "content_filter",
    "escalation": "content_filter", "other": "content_filter",   # (Gemini's OTHER: a block, as litellm maps it)
}


def openai_finish_reason(reason: str) -> str:
    """`reason` as OpenAI names it: kept when it is one of OpenAI's, else the OpenAI reason of
    the same meaning (`OTHER_NAMES`), else "stop" (an end-of-sequence by another name:
    "eos", "end_turn", "STOP", ... or a name no table knows)."""
    if reason in OPENAI_FINISH_REASONS:
        return reason
    lowered = reason.lower()
    if lowered in OPENAI_FINISH_REASONS:
        return lowered
    return OTHER_NAMES.get(lowered, "stop")


def in_openai_words(event: ChatEvent, sent: str | None = None) -> ChatEvent:
    """`event`, its finish reason (a `Finished`'s) made OpenAI's (`openai_finish_reason`):
    where it is litellm's "stop" and `sent`, the reason the provider sent, is known, that
    one's (litellm names every reason it does not know "stop")."""
    if isinstance(event, Finished):
        reason = sent if sent and event.finish_reason == "stop" else event.finish_reason
        event.finish_reason = openai_finish_reason(reason)
    return event


def sent_finish_reason(reply: Any) -> str | None:
    """The finish reason the provider sent in a whole litellm reply (its first choice's),
    which litellm keeps beside its own: a chat choice's `provider_specific_fields`
    `native_finish_reason` (set where litellm's name differs), a text completion's in the
    raw JSON it keeps (`_hidden_params.original_response`, read only when litellm says
    "stop"); None when it kept none, or for any other reply (plain JSON: passthrough's)."""
    choices = field_of(reply, "choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    native = field_of(field_of(choice, "provider_specific_fields"), "native_finish_reason")
    if native is not None or field_of(choice, "finish_reason") != "stop":
        return native if isinstance(native, str) else None
    raw = field_of(field_of(reply, "_hidden_params"), "original_response")
    try:
        sent = json.loads(raw)["choices"][0]["finish_reason"] if isinstance(raw, str) else None
    except (ValueError, LookupError, TypeError):   # NOTE: not the JSON litellm keeps for a text completion
        return None
    return sent if isinstance(sent, str) else None
