"""A local reply that may be tool calls or the `response_format` JSON object (tools offered
with a JSON response format, as the OpenAI Agents SDK sends for an agent that has tools
and an output type): the model's free reply, read as it streams, sent once it is decided.

- It opens an object (after a JSON code fence, if any) that cannot be a bare call (its
  first key is not `name`, `arguments` or `parameters`, or its `name` is not a tool's,
  or it has no key), or it opens with prose and then an object with a key (a bare call
  is the whole reply, so that object cannot be one; prose is any other opening that
  cannot begin a call: a `<` once it is not the `<tool_call>` tag, as SmolLM2's
  `<tool_response>` after a tool result, or a `[` whose first item cannot be a call):
  that object is the JSON reply, streamed from its brace (the prose before it is
  dropped) and completed as `tool_forcing.forced_object` reads and fills it; the free
  try stops where the object closes or strays, before any closing fence.
- Anything else (a `<tool_call>` tag, what may be a bare call or a list of them (a `[`
  whose first item may be one), another fence, prose with no object) is read whole
  (prose with neither an object nor a tag only up to `MAX_PROSE_CHARS`): its calls when
  it makes any (`tool_calls.parse_tool_calls`, each held to its tool's schema), else the
  first JSON object in it when it validates, else an object built per
  `tool_forcing.forced_json` with what is left of the budget. The free try gets only the
  JSON reply's share of `max_tokens` (`free_budget`: the rest fills the object); one cut
  there that shows calls (a `<tool_call>` tag, or a bare call's opening) goes on with the
  rest of `max_tokens`, as a reply to tools alone would (QA220 F1).

`stop` is applied by the gateway, not the workers (`tool_forcing.StopCut`): to the free
text read whole, and to the JSON reply as it is sent (the object's text, from its brace).

Invariant: the reply is either tool calls (finish "tool_calls", or "length" when the free
reply ran out of `max_tokens`, "stop" when a stop string cut it) or one JSON object
(finish "stop": valid as `tool_forcing` promises, or cut before a stop string, its JSON
then cut); usage counts every generation (`generate` keeps it).
"""
from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

from gateway.backend import ChatEvent, TextDelta, ToolCallDelta
from gateway.collected import reply_finish_reason
from gateway.ids import new_tool_call_id
from gateway.tool_calls import OPEN_TAG, opens_bare_json, parse_tool_calls
from gateway.json_validity import is_valid
from gateway.tool_forcing import (StopCut, cut_at_stops, forced_json, forced_object, free_budget, held_to_schema,
                                  json_object_in)

CALL_KEYS = frozenset({"name", "arguments", "parameters"})
NOT_JSON = -1   # `json_reply_start`: the reply may be anything else; read it whole
MAX_PROSE_BRACES = 8   # braces looked at after prose (as `tool_forcing.json_object_in`)
# `json_reply_start`: this much prose with no object and no tag yet: a call is unlikely to
# follow, so stop the free reply and build the object (without it, up to half of a large
# `max_tokens` could go to prose no one is sent)
PROSE_ONLY = -2
MAX_PROSE_CHARS = 512
FENCE = "```"
MAX_FENCE_LINE = 16   # "```json" and some spaces: a longer first line without its newline is no JSON fence
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def json_reply_start(text: str, tool_names: frozenset[str]) -> int | None:
    """Where the JSON reply's object starts in a free reply that begins with `text`;
    `NOT_JSON` when the reply may be anything else, a call included (read it whole);
    `PROSE_ONLY` when it is long prose with neither (stop reading it); None while too
    little is written to tell."""
    at = len(text) - len(text.lstrip())
    head = text[at:]
    if not head:
        return None
    if head[0] == "`":   # a code fence (small models often fence their JSON): what follows it
        after = _after_fence(head)
        if after is None or after == NOT_JSON:
            return after
        at += after + len(head[after:]) - len(head[after:].lstrip())
        head = text[at:]
        if not head:
            return None
    if head[0] == "{":
        return _at(_opens_reply_object(head, tool_names, strays_count=True), at)
    if OPEN_TAG in text:
        return NOT_JSON
    # "[": a list of bare calls, or prose ("[1]", or a list of reply objects) read as below
    if head[0] == "[" and (may_list := _may_list_calls(head, tool_names)) is not False:
        return None if may_list is None else NOT_JSON
    # prose first (an opening "<" too, once it is not the tool-call tag: `<tool_response>`):
    # a bare call must be the whole reply, so any object after it is the reply (the first
    # one that opens with a key; a tool-call tag before it keeps the reply whole)
    brace = text.find("{", at)
    for _ in range(MAX_PROSE_BRACES):
        if brace < 0:
            tag_begun = any(text.endswith(OPEN_TAG[:size]) for size in range(1, len(OPEN_TAG)))
            return PROSE_ONLY if len(text) - at > MAX_PROSE_CHARS and not tag_begun else None
        opening = _opens_reply_object(text[brace:], tool_names, strays_count=False)
        if opening is None or opening:
            return _at(opening, brace)
        brace = text.find("{", brace + 1)
    return NOT_JSON


def _may_list_calls(head: str, tool_names: frozenset[str]) -> bool | None:
    """For `head` starting with "[": whether it may open a list of bare calls (its first
    item opens an object that may be a call); None while unsure."""
    item = head[1:].lstrip()
    if not item:
        return None
    if item[0] != "{":
        return False   # a call list's items are call objects
    opening = _opens_reply_object(item, tool_names, strays_count=True)
    return None if opening is None else not opening


def _at(opening: bool | None, at: int) -> int | None:
    return None if opening is None else at if opening else NOT_JSON


def _after_fence(head: str) -> int | None:
    """Where the text after a JSON code fence's first line starts in `head` (which starts
    with a backtick); `NOT_JSON` when it is no JSON fence; None while unsure."""
    if len(head) < len(FENCE) and FENCE.startswith(head):
        return None
    line_end = head.find("\n")
    if not head.startswith(FENCE) or line_end < 0 and len(head) > MAX_FENCE_LINE:
        return NOT_JSON
    if line_end < 0:
        return None
    return line_end + 1 if head[len(FENCE):line_end].strip().lower() in ("", "json") else NOT_JSON


def _opens_reply_object(text: str, tool_names: frozenset[str], strays_count: bool) -> bool | None:
    """For `text` starting with "{": whether it opens an object that cannot be a bare call
    (True), or may be one (False); None while unsure. An object with no key first (`{}`,
    or a stray) counts as the reply when `strays_count`, else as False."""
    body = text[1:].lstrip()
    if not body:
        return None
    if body[0] != '"':
        return strays_count   # `{}`, or a stray the reader will meet: no call either way
    key = _STRING.match(body)
    if key is None:
        return None
    name = _decoded(key.group())
    if name != "name":
        return name not in CALL_KEYS
    after = body[key.end():].lstrip()
    if not after:
        return None
    if after[0] != ":":
        return strays_count   # a stray the reader will meet
    rest = after[1:].lstrip()
    if not rest:
        return None
    if rest[0] != '"':
        return True   # a call's name is a string
    value = _STRING.match(rest)
    if value is not None:   # a call's name counts stripped (`tool_calls.call_from_json`)
        return (_decoded(value.group()) or "").strip() not in tool_names
    written = rest[1:].lstrip()   # the name so far, still open: True once no tool's name starts so
    return None if any(tool.startswith(written) for tool in tool_names) or "\\" in written else True


def _decoded(string: str) -> str | None:
    """A JSON string literal's value; None for a bad escape (a stray: neither a key nor a name)."""
    try:
        return json.loads(string)
    except ValueError:
        return None


async def _going_on(lead: str, rest: AsyncIterator[str]) -> AsyncIterator[str]:
    """`lead`, then what `rest` still yields; closing this closes `rest` (the generation stops)."""
    try:
        yield lead
        async for text in rest:
            yield text
    finally:
        await rest.aclose()


async def json_or_tool_calls(schema: dict, tool_names: frozenset[str], keep_one_call: bool,
                             stop: tuple[str, ...], generate,
                             tool_schemas: dict[str, dict | None] | None = None) -> AsyncIterator[ChatEvent]:
    """The reply as events, the last one `Finished`. `generate` is a
    `engine_streams.Continuations` (stream, call, `max_total`, `usage`,
    `last_finish_reason`, `finished`). A call whose arguments fail its tool's schema (in
    `tool_schemas`) is repaired (`tool_forcing.held_to_schema`). The workers get no stop
    strings: `stop` cuts the free text read whole (`free_cut`) and the JSON reply as sent
    (`tool_forcing.cut_at_stops`), so a JSON reply is the model's own text up to a stop string."""
    free_cut = StopCut(stop)
    free = generate.stream("", free_budget(generate.max_total), ())
    lead, start, kept = "", None, []   # the free text, what `free_cut` let through of it
    try:
        async for text in free:
            lead += text
            kept.append(free_cut.feed(text))
            start = json_reply_start(lead, tool_names)
            if start is not None or free_cut.stopped:
                break
        if start is not None and start >= 0:
            rest = _going_on(lead[start:], free)   # from the object's brace, past any prose or fence
            async for piece in cut_at_stops(forced_object(schema, generate, "", generate.max_total,
                                                          stream=lambda *_: rest, can_ask=generate.can_ask), stop):
                yield TextDelta(piece)
            yield generate.finished("stop")
            return
        if start != PROSE_ONLY and not free_cut.stopped:
            lead += await _read(free, free_cut, kept)
    finally:
        await free.aclose()
    if start != PROSE_ONLY and not free_cut.stopped and _calls_cut_short(lead, generate):
        more = generate.stream(lead, generate.max_total, ())
        try:   # the calls go on with the rest of `max_tokens`, not the JSON reply's share
            await _read(more, free_cut, kept)
        finally:
            await more.aclose()
    text = "".join(kept) + free_cut.flush()
    free_finish = "stop" if free_cut.stopped or start == PROSE_ONLY else generate.last_finish_reason or "stop"
    parsed = parse_tool_calls(text, tool_names)
    if parsed.tool_calls:
        if parsed.content:
            yield TextDelta(parsed.content)
        for index, call in enumerate(parsed.tool_calls[:1] if keep_one_call else parsed.tool_calls):
            arguments = await held_to_schema((tool_schemas or {}).get(call.name), call.arguments, call.name,
                                             generate, generate.max_total)
            yield ToolCallDelta(index, new_tool_call_id(), call.name, "")
            yield ToolCallDelta(index, None, None, arguments)
        yield generate.finished(reply_finish_reason(free_finish, True))
        return
    value = json_object_in(text)
    if value is not None and is_valid(value, schema):
        pieces = _one(json.dumps(value, ensure_ascii=False))
    else:
        budget = generate.max_total - generate.usage.num_completion_tokens
        pieces = forced_json(schema, generate, budget, generate.stream, generate.can_ask)
    async for piece in cut_at_stops(pieces, stop):
        yield TextDelta(piece)
    yield generate.finished("stop")


def _calls_cut_short(text: str, generate) -> bool:
    """Whether the free reply, cut by its JSON share of the budget (`free_budget`) with
    some of `max_tokens` left, shows calls (a `<tool_call>` tag, its start at the end,
    what opens as a bare call): they go on with the rest, as with no `response_format`."""
    if generate.last_finish_reason != "length" or not generate.can_ask():
        return False
    tail = text.rstrip()
    return (OPEN_TAG in text or any(tail.endswith(OPEN_TAG[:size]) for size in range(2, len(OPEN_TAG)))
            or bool(opens_bare_json(text)))


async def _read(pieces: AsyncIterator[str], cut: StopCut, kept: list[str]) -> str:
    """`pieces` read until they end or `cut` stops, what it lets through added to `kept`;
    returns the text read."""
    read = []
    async for text in pieces:
        read.append(text)
        kept.append(cut.feed(text))
        if cut.stopped:
            break
    return "".join(read)


async def _one(text: str) -> AsyncIterator[str]:
    yield text
