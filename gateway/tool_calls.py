"""Tool calls in model output text: Hermes/Qwen `<tool_call>{json}</tool_call>` blocks and
bare JSON objects (`{"name": ..., "arguments": {...}}`, or a list of them), also inside a
```` ```json ```` (or plain ```` ``` ````) code fence, as small models often write them.

Pure functions, no I/O. Invariants: a parsed call always has a non-empty `name` and
`arguments` that is the JSON text of an object; text that does not parse as a call is
never dropped, it stays content (whitespace that only separates or surrounds calls is
not content: a reply made only of calls has none, as OpenAI's). A reply that ends inside a
`<tool_call>` (cut by `max_tokens` or a stop) makes a call when its JSON is whole, even cut
inside the closing tag (`...}\n</tool_`: that tag's start is no content); a call whose
JSON is cut stays content, tag and all. `ToolCallStreamParser`
gives the same calls as `parse_tool_calls` on the concatenated text, while releasing plain
text as early as it can (it holds back only a possible `<tool_call>` prefix, trailing
whitespace until text follows it, or everything when the reply opens as bare JSON, fenced
or not, since that can only be decided at the end, and a fence's opening until it is known
whether bare JSON follows it).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from agents_trace.json_text import loads_bounded

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
# a bare call's opening inside a code fence (```` ```json ````, as `_decode` strips it)
_FENCED_OPENING = re.compile(r"```(?:json)?\s*[{\[]")
FENCE_JSON = "```json"


@dataclass(slots=True)
class ParsedToolCall:
    name: str
    arguments: str


@dataclass(slots=True)
class ParsedOutput:
    content: str | None
    tool_calls: list[ParsedToolCall] = field(default_factory=list)


def call_from_json(value: object, tool_names: frozenset[str] | None) -> ParsedToolCall | None:
    """A call from a decoded `{"name", "arguments"|"parameters"}` object, else None."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    name = value["name"].strip()
    if not name or (tool_names is not None and name not in tool_names):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = loads_bounded(arguments) if arguments.strip() else {}
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return ParsedToolCall(name, json.dumps(arguments, ensure_ascii=False))


def _decode(text: str) -> object | None:
    text = text.strip()
    if text.startswith("```"):
        text = text.removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    try:
        return loads_bounded(text)
    except ValueError:
        return None


def opens_bare_json(text: str) -> bool | None:
    """Whether `text` opens as a bare call or a list of them may (a `{` or `[` first, or
    after a ```` ```json ```` or plain ```` ``` ```` fence, as `_decode` reads it); None
    while a fence's opening is too short to tell."""
    head = text.lstrip()
    if head[:1] in ("{", "["):
        return True
    if not head.startswith("`"):
        return False if head else None
    if _FENCED_OPENING.match(head):
        return True
    if FENCE_JSON.startswith(head) or head.rstrip() in ("```", FENCE_JSON):
        return None   # a fence's first characters, or a fence with only whitespace after it yet
    return False


def parse_bare_json(text: str, tool_names: frozenset[str] | None) -> list[ParsedToolCall] | None:
    """Calls when the whole text is one call object or a list of them; else None."""
    value = _decode(text)
    items = value if isinstance(value, list) else [value]
    calls = [call_from_json(item, tool_names) for item in items]
    if not calls or any(call is None for call in calls):
        return None
    return calls


def unclosed_call(body: str, tool_names: frozenset[str] | None) -> ParsedToolCall | None:
    """The call in the text after a `<tool_call>` tag the reply ended inside, else None.
    A closing tag the reply was cut in (any proper prefix of `</tool_call>` at its very end)
    is left off before the JSON is read, so where the cut falls in the tag does not decide
    whether a whole call is one; a call whose JSON is cut is none."""
    return call_from_json(_decode(body[:len(body) - _held_prefix_len(body, CLOSE_TAG)]), tool_names)


def parse_tool_calls(text: str, tool_names: frozenset[str] | None = None) -> ParsedOutput:
    """Split model output into content and tool calls.

    `tool_names`, when given, restricts calls to those tools; anything else stays text.
    """
    if OPEN_TAG not in text:
        bare = parse_bare_json(text, tool_names) if opens_bare_json(text) else None
        if bare is not None:
            return ParsedOutput(None, bare)
        return ParsedOutput(text or None)
    content_parts: list[str] = []
    calls: list[ParsedToolCall] = []
    rest = text
    while OPEN_TAG in rest:
        before, _, after = rest.partition(OPEN_TAG)
        content_parts.append(before)
        body, closed, rest = after.partition(CLOSE_TAG)
        call = call_from_json(_decode(body), tool_names) if closed else unclosed_call(body, tool_names)
        if call is None:
            content_parts.append(OPEN_TAG + body + (CLOSE_TAG if closed else ""))
        else:
            calls.append(call)
    content_parts.append(rest)
    content = "".join(content_parts)
    if calls:
        content = content.strip()
    return ParsedOutput(content or None, calls)


@dataclass(slots=True)
class ContentPiece:
    text: str


@dataclass(slots=True)
class CallPiece:
    call: ParsedToolCall


StreamPiece = ContentPiece | CallPiece


def _held_prefix_len(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag`."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


class ToolCallStreamParser:
    """Incremental `parse_tool_calls`: feed text deltas, get content pieces and whole calls.
    Linear in the reply: the text of an open call or a bare JSON reply is kept as parts,
    joined once, and each delta is searched only with the few characters before it that
    could begin a closing tag.

    Whitespace is held until text that is not whitespace follows it (then it goes out
    with that text, calls between them or not) or the reply ends. Where it only separates
    or surrounds calls it is dropped: before the first text after a call and at the end of
    a reply that made calls, so parallel calls written on separate lines are calls only
    (no "\n" content between them, no message item in a Responses reply), and the
    content is `parse_tool_calls`' but for whitespace before text that came before any
    call (already sent). A reply without calls keeps all of its text.
    """

    __slots__ = ("_tool_names", "_buffer", "_in_call", "_bare", "_seen_text", "_parts", "_tail", "_space",
                 "_made_call", "_sent_text")

    def __init__(self, tool_names: frozenset[str] | None = None) -> None:
        self._tool_names = tool_names
        self._buffer = ""     # text not yet decided (outside a call: at most a tag's prefix)
        self._in_call = False
        self._bare = False
        self._seen_text = False
        self._parts: list[str] = []   # an open call's text after `_buffer`, or a bare reply's
        self._tail = ""       # the last characters of `_parts` that could begin CLOSE_TAG
        self._space: list[str] = []   # content whitespace held until text follows it (or the reply ends)
        self._made_call = False   # a call was released
        self._sent_text = False   # content (not only whitespace) was released

    def feed(self, delta: str) -> list[StreamPiece]:
        if self._bare:
            self._parts.append(delta)
            return []
        if self._in_call and self._parts:
            window = self._tail + delta
            if CLOSE_TAG not in window:
                self._parts.append(delta)
                self._tail = window[-(len(CLOSE_TAG) - 1):]
                return []
            self._parts.append(delta)
            self._buffer += "".join(self._parts)
            self._parts, self._tail = [], ""
        else:
            self._buffer += delta
        if not self._seen_text:
            head = self._buffer.lstrip()
            if not head:
                return []
            opens = opens_bare_json(head)
            if opens is None:
                return []   # a fence that may still open a bare call: held until it is known
            self._seen_text = True
            if opens:
                self._bare = True
                self._parts, self._buffer = [self._buffer], ""
                return []
        return self._spaced(self._drain(final=False), final=False)

    def finish(self) -> list[StreamPiece]:
        self._buffer += "".join(self._parts)
        self._parts, self._tail = [], ""
        if self._bare:
            calls = parse_bare_json(self._buffer, self._tool_names)
            text, self._buffer = self._buffer, ""
            if calls is not None:
                return [CallPiece(call) for call in calls]
            return [ContentPiece(text)] if text else []
        pieces = self._drain(final=True)
        if self._buffer or self._in_call:   # a reply cut right after `<tool_call>` keeps the tag, as whole
            if self._in_call:
                call = unclosed_call(self._buffer, self._tool_names)
                pieces.append(CallPiece(call) if call else ContentPiece(OPEN_TAG + self._buffer))
            else:
                pieces.append(ContentPiece(self._buffer))
            self._buffer, self._in_call = "", False
        return self._spaced(pieces, final=True)

    def _spaced(self, pieces: list[StreamPiece], *, final: bool) -> list[StreamPiece]:
        """`pieces` with content whitespace held (`_space`) until text follows it, and
        dropped where it only separates or surrounds calls: when a call came before the
        first text, and at the end of a reply that made calls."""
        out: list[StreamPiece] = []
        for piece in pieces:
            if isinstance(piece, CallPiece):
                self._made_call = True
                out.append(piece)
                continue
            body = piece.text.rstrip()
            if not body:   # whitespace alone (kept as parts: a long run of it stays linear)
                self._space.append(piece.text)
                continue
            text = "".join(self._space) + body
            self._space = [piece.text[len(body):]] if len(body) < len(piece.text) else []
            if self._made_call and not self._sent_text:
                text = text.lstrip()
            out.append(ContentPiece(text))
            self._sent_text = True
        if final:
            space, self._space = "".join(self._space), []
            if space and not self._made_call:   # a reply of text alone keeps all of it
                out.append(ContentPiece(space))
        return out

    def _drain(self, *, final: bool) -> list[StreamPiece]:
        pieces: list[StreamPiece] = []
        while True:
            if self._in_call:
                body, closed, rest = self._buffer.partition(CLOSE_TAG)
                if not closed:
                    if not final:   # later deltas are searched from here on
                        self._parts, self._tail = [self._buffer], self._buffer[-(len(CLOSE_TAG) - 1):]
                        self._buffer = ""
                    return pieces
                call = call_from_json(_decode(body), self._tool_names)
                pieces.append(CallPiece(call) if call
                              else ContentPiece(OPEN_TAG + body + CLOSE_TAG))
                self._buffer, self._in_call = rest, False
                continue
            before, opened, rest = self._buffer.partition(OPEN_TAG)
            if opened:
                if before:
                    pieces.append(ContentPiece(before))
                self._buffer, self._in_call = rest, True
                continue
            held = 0 if final else _held_prefix_len(self._buffer, OPEN_TAG)
            ready = self._buffer[:len(self._buffer) - held]
            if ready:
                pieces.append(ContentPiece(ready))
            self._buffer = self._buffer[len(ready):]
            return pieces
