"""`--max-input-tokens` for a trace line with `messages`: its chat prompt cut to about
the cap, keeping the head, as a token-id prompt is cut (prompts.py).

The replay has no tokenizer, so it measures characters: the line's recorded
`input_tokens` spread over the JSON text of its `tools` and `messages` gives the tokens
a character stands for, and the cap becomes a share of those characters. The tools are
kept whole and counted first (the chat template puts them ahead of the messages); then
the messages are kept in order while they fit; the first that does not fit is kept with
its text cut to the characters left (a string `content`, or its text parts in order),
and the messages after it are left out. Invariant: the result is a prefix of the
messages, the last one possibly cut, and never empty; so every tool message still
answers a call an earlier assistant message made, and two steps of a session that share
their head still share it once cut.
"""
from __future__ import annotations

import json


def _chars(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _cut_content(content: object, num_chars: int) -> object:
    """`content` with its text cut to `num_chars` characters in all (a string, or the
    text parts of a list in order; other parts are kept); None and other values as they are."""
    if isinstance(content, str):
        return content[:num_chars]
    if not isinstance(content, list):
        return content
    parts = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
            part = dict(part, text=part["text"][:num_chars])
            num_chars -= len(part["text"])
        parts.append(part)
    return parts


def cut_messages(messages: list, tools: list | None, input_tokens: int, max_input_tokens: int | None) -> list:
    """`messages` cut to about `max_input_tokens` of the recorded `input_tokens` (see the
    module docstring); the list itself when no cut is due."""
    if max_input_tokens is None or input_tokens <= max_input_tokens or not messages:
        return messages
    total_chars = _chars(messages) + (_chars(tools) if tools else 0)
    left = total_chars * max_input_tokens // input_tokens - (_chars(tools) if tools else 0)
    kept: list = []
    for message in messages:
        size = _chars(message)
        if size <= left:
            kept.append(message)
            left -= size
            continue
        if isinstance(message, dict) and "content" in message:
            overhead = _chars(dict(message, content=""))
            message = dict(message, content=_cut_content(message["content"], max(0, left - overhead)))
        kept.append(message)
        break
    return kept
