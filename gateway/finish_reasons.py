"""An upstream's finish reason in OpenAI's words, on both upstream paths alike.

OpenAI's APIs name why a choice ended with one of `OPENAI_FINISH_REASONS`; other servers
behind an OpenAI-compatible `api_base` send their own names too ("eos", "eos_token",
"end_turn", "max_tokens", "tool_use", "SAFETY", ...). litellm maps every reason to OpenAI's
set before the gateway reads it (an unknown one becomes "stop"); the passthrough path
(gateway/passthrough.py) reads the upstream's JSON itself. Both backends pass each choice's
`Finished` through `in_openai_words` (on the litellm path it finds OpenAI's words already).

Invariants: `openai_finish_reason` returns one of `OPENAI_FINISH_REASONS`; a reason in that
set is kept as sent; another (case aside) becomes the OpenAI reason of the same meaning
(`OTHER_NAMES`: the common names that litellm too maps to something other than "stop"),
any other one "stop", as litellm maps it. It is pure and cheap (a set and a dict look-up):
it runs once per choice, on the hot path.
"""
from __future__ import annotations

from gateway.backend import ChatEvent, Finished

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


def in_openai_words(event: ChatEvent) -> ChatEvent:
    """`event`, its finish reason (a `Finished`'s) made OpenAI's (`openai_finish_reason`)."""
    if isinstance(event, Finished):
        event.finish_reason = openai_finish_reason(event.finish_reason)
    return event
