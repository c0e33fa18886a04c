"""Reading agent structure out of an OpenAI chat request: session hints, the agent's name,
conversation digests, and the tool results a request carries.

Pure functions, no I/O. Invariants:
- `prefix_digests(tenant, messages)[i]` depends only on the tenant and `messages[:i+1]`,
  so two requests share the first k digests exactly when they share the first k
  messages (in canonical form) *and* the tenant: no digest of one tenant ever equals
  one of another, which is what keeps prefix stitching tenant-scoped;
- a message's canonical form keeps what an agent re-sends unchanged (role, text,
  tool-call ids, names and arguments as parsed JSON, tool_call_id) and drops what
  clients rewrite freely (whitespace around text, `refusal`, extra fields), so a
  response echoed back in the next request digests the same as the response itself.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agents_trace.header_ids import decode_header_id
from agents_trace.json_text import loads_bounded
from agents_trace.records import After, SessionSource, ToolCall

DIGEST_BYTES = 16
_ROOT = b"stepahead-conversation/1\x00"
SESSION_HEADER = "x-session-id"
AGENT_HEADER = "x-agent-name"
MAX_CLIENT_ID_CHARS = 256
# NOTE: built once (immutable settings): json.dumps with keyword arguments builds a new
# encoder per call, a third of a tool-call message's encoding time.
_canonical_json = json.JSONEncoder(ensure_ascii=False, sort_keys=True, default=str).encode


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).digest()


def _text(content: Any) -> Any:
    """A message's content in canonical form: stripped text, or a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        parts = [part.get("text", "") if isinstance(part, dict)
                 and part.get("type") in ("text", "input_text", "output_text") else part
                 for part in content]
        if all(isinstance(part, str) for part in parts):
            return "".join(parts).strip()
        return parts
    return content


def _arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return loads_bounded(arguments) if arguments.strip() else {}
        except ValueError:
            return arguments
    return arguments


def _field(value: str) -> bytes:
    encoded = value.encode("utf-8", "surrogatepass")
    return b"%d:" % len(encoded) + encoded


def encode_message(message: Mapping[str, Any]) -> bytes:
    """The canonical form of a message as unambiguous bytes (length-prefixed fields):
    role, text (or JSON of non-text parts), tool calls as [id, name, parsed arguments],
    tool_call_id. NOTE: plain-text messages, most of a conversation, skip JSON."""
    text = _text(message.get("content"))
    if not isinstance(text, str):
        text = "\x00" + _canonical_json(text)
    calls = []
    for call in message.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        calls.append([call.get("id"), function.get("name"), _arguments(function.get("arguments"))])
    encoded_calls = _canonical_json(calls) if calls else ""
    return b"".join((_field(str(message.get("role"))), _field(text), _field(encoded_calls),
                     _field(str(message.get("tool_call_id") or ""))))


def root_digest(tenant: str) -> bytes:
    return _digest(_ROOT + _field(tenant))


def call_id_digest(tenant: str, call_id: str) -> bytes:
    """A tool call's id as an index key, rooted in the tenant as the prefix digests are
    (so one tenant's call id never finds another's); its tag, a NUL byte then `call`,
    keeps it apart from every `extend_digest` input, whose next byte is a digit."""
    return _digest(root_digest(tenant) + b"\x00call" + _field(call_id))


def extend_digest(previous: bytes, message: Mapping[str, Any]) -> bytes:
    return _digest(previous + encode_message(message))


def prefix_digests(tenant: str, messages: Sequence[Any]) -> list[bytes]:
    """Chained digests: entry i covers the tenant and `messages[:i+1]`."""
    out: list[bytes] = []
    current = root_digest(tenant)
    for message in messages:
        current = extend_digest(current, message if isinstance(message, dict) else {})
        out.append(current)
    return out


def assistant_message(text: str | None, tool_calls: Sequence[ToolCall]) -> dict:
    """A response as the client will echo it back in its next request."""
    message: dict = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = [{"id": call.call_id, "type": "function",
                                  "function": {"name": call.name, "arguments": call.arguments}}
                                 for call in tool_calls]
    return message


def _client_id(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value[:MAX_CLIENT_ID_CHARS] if value else None


def _header_id(headers: Mapping[str, str], name: str) -> str | None:
    """A client id from a header, read as header_ids decodes it (UTF-8, percent-decoded:
    what an answer's own `x-session-id` sent back names the same session)."""
    value = headers.get(name)
    return _client_id(decode_header_id(value)) if isinstance(value, str) else None


def explicit_session(headers: Mapping[str, str],
                     body: Mapping[str, Any]) -> tuple[str, SessionSource] | None:
    """The session the client names: `x-session-id` (header_ids: UTF-8, percent-decoded),
    else `metadata.session_id`. Never `user`: OpenAI's end-user id, the same for every run
    that end user starts (QA170: two agent runs of one user, at once or one after the
    other, were one session, each run's first step a "user turn" and a forecast miss);
    a request with only `user` is stitched by prefix. ("user" stays a SessionSource:
    stores written before keep it.)"""
    from_header = _header_id(headers, SESSION_HEADER)
    if from_header:
        return from_header, "header"
    metadata = body.get("metadata")
    if isinstance(metadata, dict):
        from_metadata = _client_id(metadata.get("session_id"))
        if from_metadata:
            return from_metadata, "metadata"
    return None


def agent_name(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """`x-agent-name` (read as `x-session-id` is), else `metadata.agent_name` / `metadata.agent`."""
    name = _header_id(headers, AGENT_HEADER)
    metadata = body.get("metadata")
    if name is None and isinstance(metadata, dict):
        name = _client_id(metadata.get("agent_name")) or _client_id(metadata.get("agent"))
    return name


def trailing_tool_call_ids(messages: Sequence[Any]) -> list[str]:
    """The tool_call_ids of the tool messages that end the conversation, in order."""
    ids: list[str] = []
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "tool":
            break
        ids.append(str(message.get("tool_call_id") or ""))
    ids.reverse()
    return ids


def history_tool_names(messages: Sequence[Any]) -> dict[str, str]:
    """tool_call_id -> tool name (cut to MAX_CLIENT_ID_CHARS, as the client's other names
    are), from every assistant message's tool_calls."""
    names: dict[str, str] = {}
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or ():
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                name = call["function"].get("name")
                if isinstance(name, str) and name:
                    names[str(call.get("id"))] = name[:MAX_CLIENT_ID_CHARS]
    return names


def after_of(messages: Sequence[Any], is_first_step: bool,
             asked: Mapping[str, str]) -> After:
    """What this request follows.

    Trailing tool results make it "tools": each result's tool is named by matching its
    tool_call_id to the calls the previous response asked for (`asked`), then to the
    assistant messages in the history; NOTE: a result matching neither (only possible
    in a request the gateway did not validate) is named by the tool message's `name`,
    else "unknown". Otherwise it is "start" for a session's first step, else "user".
    """
    call_ids = trailing_tool_call_ids(messages)
    if not call_ids:
        return After("start" if is_first_step else "user")
    # NOTE: the whole history is read only when the previous response did not ask for them all
    from_history = {} if all(call_id in asked for call_id in call_ids) else history_tool_names(messages)
    tools = []
    for offset, call_id in enumerate(call_ids):
        message = messages[len(messages) - len(call_ids) + offset]
        name = asked.get(call_id) or from_history.get(call_id) \
            or _client_id(message.get("name")) or "unknown"
        tools.append(ToolCall(call_id, name))
    return After("tools", tuple(tools))


def is_assistant(message: Any) -> bool:
    return isinstance(message, dict) and message.get("role") == "assistant"
