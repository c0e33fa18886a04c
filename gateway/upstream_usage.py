"""An upstream reply's usage, and the readers of its fields that the reply readers
(gateway/upstream_replies.py) share, its log probabilities' (`logprobs_from`) among them.

Invariant (`usage_from`): a count of 0, or none, is missing, never free: no real reply
counts 0 prompt tokens (chat framing alone is tokens; cached prompt tokens are counted
inside `prompt_tokens`), nor 0 completion tokens for output it sent. A missing prompt
count is the request's 4-bytes-a-token estimate; a missing completion count that of the
reply's output (text, refusal, tool-call names and arguments; a stream's at least one a
content chunk), 0 for a reply with no output. litellm reports a usage the provider did
not send as zeros (in a stream too: its wrapper would make one up with its tokenizer, which
`upstream.import_litellm` turns off; QA226), so both paths charge the same. Counts must be
non-negative integers, else a 502 (`litellm_errors.upstream_garbage`), so garbage never
reaches traces or spent tokens.
"""
from __future__ import annotations

import re
from typing import Any

from gateway.backend import ChatEvent, RefusalDelta, TextDelta, TokenChoice, ToolCallDelta, Usage
from gateway.litellm_errors import upstream_garbage

# a completions token's name when its bytes are not whole UTF-8: `bytes:` and their `\\xNN` escapes
BYTE_ESCAPES = re.compile(r"bytes:((?:\\x[0-9a-fA-F]{2})+)")


def field_of(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    if isinstance(obj, (str, bytes, int, float, list, tuple)):
        return default
    return getattr(obj, name, default)


def is_record(value: Any) -> bool:
    """A JSON object or a litellm object (not a scalar, list or null)."""
    return value is not None and not isinstance(value, (str, bytes, int, float, list, tuple))


def text_of(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise upstream_garbage(f"{what} is a {type(value).__name__}, not a string")


def count_of(value: Any, what: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise upstream_garbage(f"usage.{what} is {value!r:.40}, not a non-negative integer")
    return value


COMPLETION_DETAILS = ("reasoning_tokens", "audio_tokens", "accepted_prediction_tokens",
                      "rejected_prediction_tokens")


def completion_details_of(raw: Any) -> dict[str, int] | None:
    """The counts OpenAI's `completion_tokens_details` has that the upstream sent; None
    when it sent none of them."""
    if not is_record(raw):
        return None
    details = {name: count_of(field_of(raw, name), f"completion_tokens_details.{name}")
               for name in COMPLETION_DETAILS if field_of(raw, name) is not None}
    return details or None


def estimated_output_tokens(num_bytes: int) -> int:
    """A reply's output of `num_bytes` UTF-8 bytes at 4 bytes a token (rounded up, so any
    output is at least one token)."""
    return -(-num_bytes // 4)


def usage_from(raw: Any, estimate: Usage) -> Usage:
    """The upstream's usage, with `estimate`'s count for each count it did not send or
    sent as 0 (the module's usage invariant): a missing prompt count is at least the
    cached and cache-write tokens it did count. Counts must be non-negative integers (else
    a 502), so garbage never reaches traces or spent tokens."""
    if raw is not None and not is_record(raw):
        raise upstream_garbage("usage is not an object")
    details = field_of(raw, "prompt_tokens_details")
    num_cached_tokens = (count_of(field_of(details, "cached_tokens"), "prompt_tokens_details.cached_tokens")
                         if details else 0)
    num_cache_write_tokens = (count_of(field_of(details, "cache_write_tokens"),
                                     "prompt_tokens_details.cache_write_tokens") if details else 0)
    completion_details = completion_details_of(field_of(raw, "completion_tokens_details"))
    num_prompt_tokens = (count_of(field_of(raw, "prompt_tokens"), "prompt_tokens")
                         or max(estimate.num_prompt_tokens, num_cached_tokens + num_cache_write_tokens))
    num_completion_tokens = (count_of(field_of(raw, "completion_tokens"), "completion_tokens")
                             or max(estimate.num_completion_tokens,
                                    (completion_details or {}).get("reasoning_tokens", 0)))
    return Usage(num_prompt_tokens=num_prompt_tokens, num_completion_tokens=num_completion_tokens,
                 num_cached_tokens=num_cached_tokens, completion_tokens_details=completion_details,
                 num_cache_write_tokens=num_cache_write_tokens)


def embedding_usage_from(raw: Any) -> tuple[int, int]:
    """An embeddings reply's usage as (prompt tokens, total tokens), checked as
    `usage_from` checks chat's: non-negative integers, else a 502. (0, 0) when it sent
    none (the caller charges an estimate then: `embeddings.charged_upstream`); a total it
    did not send (or sent as 0) is its prompt tokens."""
    usage = usage_from(raw, Usage())
    total = count_of(field_of(raw, "total_tokens"), "total_tokens") if raw is not None else 0
    return usage.num_prompt_tokens, total or usage.num_prompt_tokens


def output_bytes(event: ChatEvent) -> int:
    """The UTF-8 bytes of output an event carries (text, refusal, a tool call's name and
    arguments); 0 for any other event."""
    if isinstance(event, TextDelta):
        return len(event.text.encode())
    if isinstance(event, RefusalDelta):
        return len(event.refusal.encode())
    if isinstance(event, ToolCallDelta):
        return len((event.name or "").encode()) + len(event.arguments.encode())
    return 0


def logprobs_from(choice: Any, is_chat: bool) -> list[TokenChoice] | None:
    """The upstream choice's `logprobs` (chat's per-token entries, or the completions
    API's parallel lists), or None when it sent none. A completions token's bytes are the
    ones its name stands for (`legacy_named`), so `text_offset` is rebuilt from them; a
    log probability the upstream sent as null (an echoed prompt's first token), or did not
    send, stays None, never a made-up 0.0."""
    logprobs = field_of(choice, "logprobs")
    if not logprobs:
        return None
    if is_chat:
        def entry(raw: Any) -> tuple[str, bytes, float]:
            token, token_bytes = field_of(raw, "token") or "", field_of(raw, "bytes")
            return (token, bytes(token_bytes) if token_bytes is not None else token.encode("utf-8"),
                    float(field_of(raw, "logprob") or 0.0))
        return [TokenChoice(*entry(raw), top=tuple(entry(alt) for alt in field_of(raw, "top_logprobs") or []))
                for raw in field_of(logprobs, "content") or []]
    tokens = field_of(logprobs, "tokens") or []
    values = field_of(logprobs, "token_logprobs") or [None] * len(tokens)
    tops = field_of(logprobs, "top_logprobs") or [None] * len(tokens)
    return [TokenChoice(*legacy_named(token), None if value is None else float(value),
                        top=tuple((*legacy_named(text), float(v)) for text, v in (top or {}).items()))
            for token, value, top in zip(tokens, values, tops)]


def legacy_named(name: str) -> tuple[str, bytes]:
    """The text and bytes of a token as the completions API names it: `bytes:\\xNN...`
    (OpenAI's and vLLM's name for a piece that is not whole UTF-8) is those bytes, its text
    what they decode to (U+FFFD), as a local model's such token; any other name is its own
    text (a `bytes:` name whose bytes are whole UTF-8 too: only a piece that is not is so
    named)."""
    escapes = BYTE_ESCAPES.fullmatch(name)
    if escapes is not None:
        token_bytes = bytes.fromhex(escapes[1].replace("\\x", ""))
        try:
            token_bytes.decode("utf-8")
        except UnicodeDecodeError:
            return token_bytes.decode("utf-8", "replace"), token_bytes
    return name, name.encode("utf-8")
