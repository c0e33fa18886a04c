"""`truncation: "auto"` of the Responses API: a conversation too long for the model's
context loses its oldest turns, whole, until it fits (`responses_routes._prepared_chat`).

Invariant: a turn is cut whole (from a user message through the message before the next
one), so a tool call never loses its result, and the last turn is never cut.
"""
from __future__ import annotations


def oldest_turn(messages: list[dict]) -> slice | None:
    """`truncation: "auto"`: the messages of the oldest turn — the first message after the
    leading system messages, through the message before the next user message — so a
    tool call never loses its result; None when only the last turn is left."""
    first = next((i for i, m in enumerate(messages) if m.get("role") not in ("system", "developer")), None)
    if first is None:
        return None
    following = next((i for i in range(first + 1, len(messages)) if messages[i].get("role") == "user"), None)
    return None if following is None else slice(first, following)


def without(items: list, cut: slice) -> list:
    return items[:cut.start] + items[cut.stop:]
