"""`--max-input-tokens` for a trace line with `messages`: its chat prompt cut to about
the cap, keeping the head, as a token-id prompt is cut (prompts.py).

The replay has no tokenizer, so it measures characters: the line's recorded
`input_tokens` spread over the JSON text of its `tools` and `messages` gives the tokens
a character stands for, and the cap becomes a share of those characters. The tools are
kept whole and counted first (the chat template puts them ahead of the messages); then
the messages are kept in order while they fit; the first that does not fit is kept with
its text cut to the characters left (a string `content`, or its text parts in order),
and the messages after it are left out, but for the tool messages that answer a kept
assistant message's calls: they are kept, their text cut to nothing (a call with no
answer is refused with a 400, as at OpenAI). Invariant: the result is a prefix of the
messages, the last one possibly cut, then the kept calls' answers among the messages
that follow it (before the next user, system or developer message), cut to no text; it
is never empty, every tool message in it answers a call an earlier assistant message in
it made and every call it makes is answered; two steps of a session that share their
head still share it once cut. (A recording whose calls have no answers, which a gateway
never accepted, is cut before the first assistant message with an unanswered call.)
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
    for index, message in enumerate(messages):
        size = _chars(message)
        if size <= left:
            kept.append(message)
            left -= size
            continue
        if isinstance(message, dict) and "content" in message:
            overhead = _chars(dict(message, content=""))
            message = dict(message, content=_cut_content(message["content"], max(0, left - overhead)))
        kept.append(message)
        return _with_answers(kept, messages[index + 1:])
    return kept


def _call_ids(message: object) -> list[str]:
    """The ids of an assistant message's tool calls (none for any other message)."""
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return []
    calls = message.get("tool_calls")
    return [call["id"] for call in calls if isinstance(call, dict) and isinstance(call.get("id"), str)] \
        if isinstance(calls, list) else []


def _answer_of(message: object) -> str | None:
    """The call id a tool message answers (None for any other message)."""
    if isinstance(message, dict) and message.get("role") == "tool" and isinstance(message.get("tool_call_id"), str):
        return message["tool_call_id"]
    return None


def _with_answers(kept: list, rest: list) -> list:
    """`kept` (a cut prefix) with the tool messages of `rest` that answer its unanswered
    calls, each cut to no text, up to the next user, system or developer message (past
    it, or past one that ends `kept`, no answer may come); cut before the first assistant
    message whose call is still unanswered then (never to nothing)."""
    unanswered = _unanswered(kept)
    for message in rest if not _is_turn(kept[-1]) else ():
        if not unanswered or _is_turn(message):
            break
        if _answer_of(message) in unanswered:
            unanswered.pop(_answer_of(message))
            kept.append(dict(message, content=_cut_content(message.get("content"), 0)))
    while unanswered and min(unanswered.values()) > 0:
        kept = kept[:min(unanswered.values())]
        unanswered = _unanswered(kept)
    return kept


def _is_turn(message: object) -> bool:
    """A user, system or developer message: no answer to a call made before it may follow it."""
    return isinstance(message, dict) and message.get("role") in ("user", "system", "developer")


def _unanswered(messages: list) -> dict[str, int]:
    """The calls no tool message in `messages` answers: call id -> the index of the
    assistant message that made it."""
    unanswered: dict[str, int] = {}
    for index, message in enumerate(messages):
        unanswered.update((call_id, index) for call_id in _call_ids(message))
        unanswered.pop(_answer_of(message), None)
    return unanswered
