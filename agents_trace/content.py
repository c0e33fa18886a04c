"""Captured content: the request's entries for the store, and the GenAI conventions'
shape for opt-in span attributes.

`gen_ai.input.messages` / `gen_ai.output.messages` are JSON arrays of
`{"role", "parts": [...]}` where a part is `{"type": "text", "content"}`,
`{"type": "tool_call", "id", "name", "arguments"}` or
`{"type": "tool_call_response", "id", "response"}`. An output message's `finish_reason`
(required there) is the choice's; a reply that never finished (its client left, or it
failed part way) has none, and says "error", the conventions' value for it.

A step's stored `new_messages` are its request's messages, then the parts of the request
that are not messages but shape the prompt, as entries whose `role` no message can have
(the gateway accepts only system, developer, user, assistant and tool), so nothing reads
them as a chat:
- `{"role": "tools", "tools": [...], "tool_choice": ...}`: a chat request's tools and
  tool_choice (each only when the request had it), last;
- `{"role": "prompt", "content": TEXT}` or `{"role": "prompt", "token_ids": [...],
  "content": "N token ids"}`: a completions request's prompt, one entry per prompt.
Their `content` is text for a reader of messages (`traces show --content`); the data is in
the other fields. `gen_ai.system_instructions` is a JSON array of parts (text parts,
`gen-ai-system-instructions.json`), for instructions an API takes apart from the chat (a
Responses request's `instructions`): they are then not in `gen_ai.input.messages`. An
`execute_tool` span's opt-in `gen_ai.tool.call.arguments` / `gen_ai.tool.call.result`
come from the request's own messages (the assistant's call, the tool's message answering
it), `gen_ai.tool.description` from its tools entry. Pure functions; nothing here is
called unless the config captures content. Invariant: nothing is dropped or shortened: a part we do not know is kept as it
came, under its own type.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agents_trace import semconv as sc
from agents_trace.json_text import loads_bounded
from agents_trace.records import CapturedContent, ChoiceOutput, ToolCall

PROMPT_ROLE = "prompt"
TOOLS_ROLE = "tools"
UNFINISHED_REASON = "error"   # gen-ai-output-messages.json's FinishReason for a reply cut short


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


def system_instructions_json(text: str) -> str:
    """Instructions given apart from the chat as `gen_ai.system_instructions`: one text part."""
    return json.dumps([{"type": "text", "content": text}], ensure_ascii=False)


def span_input_messages(content: CapturedContent) -> list:
    """The chat history `gen_ai.input.messages` holds: the request's messages, less the
    first when the API took `system_instructions` apart (recorded on their own; the tracer
    sets them only when they are that first message: `CapturedContent`)."""
    return list(content.all_messages[1:] if content.system_instructions is not None else content.all_messages)


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def tool_call_attributes(content: CapturedContent, call: ToolCall) -> dict[str, str]:
    """A tool run's opt-in attributes from the captured request that carries its result:
    the arguments of the assistant's call with its id, the tool message answering it (text
    as sent, structured content as JSON) and the description of the tool offered under its
    name; each only when the request has it."""
    arguments = result = description = None
    for message in content.all_messages:
        if not isinstance(message, Mapping):
            continue
        if message.get("role") == "tool" and message.get("tool_call_id") == call.call_id:
            result = _as_text(message.get("content"))
        for asked in message.get("tool_calls") or ():
            function = asked.get("function") if isinstance(asked, Mapping) else None
            if asked.get("id") == call.call_id and isinstance(function, Mapping):
                arguments = _as_text(function.get("arguments"))
    tools = (split_tools_entry(content.new_messages)[1] or {}).get("tools")
    for tool in tools if isinstance(tools, list) else ():
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and function.get("name") == call.name \
                and isinstance(function.get("description"), str):
            description = function["description"]
    found = {sc.TOOL_CALL_ARGUMENTS: arguments, sc.TOOL_CALL_RESULT: result, sc.TOOL_DESCRIPTION: description}
    return {name: value for name, value in found.items() if value is not None}


def _output_message(text: str | None, tool_calls: Sequence[ToolCall], finish_reason: str | None) -> dict:
    parts = _content_parts(text)
    parts += [{"type": "tool_call", "id": c.call_id, "name": c.name,
               "arguments": _arguments(c.arguments)} for c in tool_calls]
    return {"role": "assistant", "parts": parts, "finish_reason": finish_reason or UNFINISHED_REASON}


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


def _is_token_ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(token, int) and not isinstance(token, bool) for token in value)


def _prompt_entry(prompt: Any) -> dict:
    if _is_token_ids(prompt):
        return {"role": PROMPT_ROLE, "token_ids": prompt, "content": f"{len(prompt)} token ids"}
    return {"role": PROMPT_ROLE, "content": prompt}


def prompt_entries(prompt: Any) -> tuple[dict, ...]:
    """A completions request's `prompt` as entries, one per prompt in order (a string or
    a token-id list is one prompt; a list of either, several). Anything else (the gateway
    checks prompts first, so only a direct caller's) is one entry holding it as it came."""
    if prompt is None:
        return ()
    several = isinstance(prompt, list) and bool(prompt) and not _is_token_ids(prompt) and all(
        isinstance(one, str) or _is_token_ids(one) for one in prompt)
    return tuple(_prompt_entry(one) for one in (prompt if several else [prompt]))


def _tool_name(tool: Any) -> str:
    function = tool.get("function") if isinstance(tool, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    return name if isinstance(name, str) else "?"


def tools_entry(tools: Any, tool_choice: Any) -> dict | None:
    """A chat request's `tools` and `tool_choice` as one entry (None when it had neither);
    its `content` names the tools offered and the choice."""
    if tools is None and tool_choice is None:
        return None
    entry: dict = {"role": TOOLS_ROLE}
    words = []
    if tools is not None:
        entry["tools"] = tools
        names = [_tool_name(tool) for tool in tools] if isinstance(tools, list) else ["?"]
        words.append(", ".join(names) if names else "no tools")
    if tool_choice is not None:
        entry["tool_choice"] = tool_choice
        named = _tool_name(tool_choice) if isinstance(tool_choice, Mapping) else str(tool_choice)
        words.append(f"(tool_choice: {named})")
    entry["content"] = " ".join(words)
    return entry


def request_entries(body: Mapping[str, Any]) -> tuple[dict, ...]:
    """The entries (see above) of a request body: its prompts when it has no `messages`
    list (a completions request), else its tools entry, if any."""
    if not isinstance(body.get("messages"), list):
        return prompt_entries(body.get("prompt"))
    entry = tools_entry(body.get("tools"), body.get("tool_choice"))
    return () if entry is None else (entry,)


def prompt_messages(entries: Sequence[Any]) -> list[dict]:
    """A completions request's text prompts (its `prompt` entries) as the user messages
    `gen_ai.input.messages` holds for a text completion; a token-id prompt has no text to
    show, and is left out."""
    return [{"role": "user", "content": entry["content"]} for entry in entries
            if isinstance(entry, Mapping) and entry.get("role") == PROMPT_ROLE and "token_ids" not in entry
            and isinstance(entry.get("content"), str)]


def split_tools_entry(new_messages: Sequence[Any]) -> tuple[list, Mapping[str, Any] | None]:
    """Stored `new_messages` as (the messages, the tools entry or None)."""
    if new_messages and isinstance(new_messages[-1], Mapping) and new_messages[-1].get("role") == TOOLS_ROLE:
        return list(new_messages[:-1]), new_messages[-1]
    return list(new_messages), None
