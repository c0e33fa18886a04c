"""Message content in the GenAI conventions' shape, for opt-in span attributes.

`gen_ai.input.messages` / `gen_ai.output.messages` are JSON arrays of
`{"role", "parts": [...]}` where a part is `{"type": "text", "content"}`,
`{"type": "tool_call", "id", "name", "arguments"}` or
`{"type": "tool_call_response", "id", "response"}`. Pure functions; nothing here is
called unless the config captures content. Invariant: nothing is dropped or shortened:
a part we do not know is kept as it came, under its own type.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agents_trace.json_text import loads_bounded
from agents_trace.records import ChoiceOutput, ToolCall


def _arguments(text: Any) -> Any:
    if isinstance(text, str):
        try:
            return loads_bounded(text)
        except ValueError:
            return text
    return text


def _content_parts(content: Any) -> list[dict]:
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") in ("text", "input_text",
                                                                 "output_text"):
                parts.append({"type": "text", "content": part.get("text", "")})
            else:
                parts.append(dict(part) if isinstance(part, Mapping) else {"type": "unknown",
                                                                          "content": part})
        return parts
    return [{"type": "unknown", "content": content}]


def semconv_message(message: Mapping[str, Any]) -> dict:
    role = message.get("role")
    if role == "tool":
        return {"role": "tool", "parts": [{"type": "tool_call_response",
                                          "id": message.get("tool_call_id"),
                                          "response": message.get("content")}]}
    parts = _content_parts(message.get("content"))
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping):
            function = call.get("function") or {}
            parts.append({"type": "tool_call", "id": call.get("id"),
                          "name": function.get("name"),
                          "arguments": _arguments(function.get("arguments"))})
    return {"role": role, "parts": parts}


def input_messages_json(messages: Sequence[Any]) -> str:
    return json.dumps([semconv_message(m) for m in messages if isinstance(m, Mapping)],
                      ensure_ascii=False, default=str)


def _output_message(text: str | None, tool_calls: Sequence[ToolCall], finish_reason: str | None) -> dict:
    parts = _content_parts(text)
    parts += [{"type": "tool_call", "id": c.call_id, "name": c.name,
               "arguments": _arguments(c.arguments)} for c in tool_calls]
    return {"role": "assistant", "parts": parts, "finish_reason": finish_reason or "stop"}


def output_messages_json(text: str | None, tool_calls: Sequence[ToolCall], finish_reason: str | None,
                         other_choices: Sequence[ChoiceOutput] = (),
                         other_outputs: Sequence[Mapping[str, Any]] = ()) -> str:
    """One output message per choice, in choice order (the conventions' shape for n > 1):
    choice 0 from the arguments, the others' text from their captured `other_outputs`."""
    messages = [_output_message(text, tool_calls, finish_reason)]
    for choice, output in zip(other_choices, other_outputs):
        content = output.get("content")
        messages.append(_output_message(content if isinstance(content, str) else None, choice.tool_calls,
                                        choice.finish_reason))
    return json.dumps(messages, ensure_ascii=False, default=str)
