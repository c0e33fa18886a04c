"""Forced tool calls and JSON replies for local models: `tool_choice` = "required" or a
named function, and `response_format` json_object / json_schema.

Our local workers take token ids and sampling settings, not grammars, so we cannot mask
logits. Instead the gateway checks what the model writes as it writes it, and writes the
structure itself where the model strays (each generation continues the previous text, so
each one is a prefix-cache hit):

(A JSON reply is step 2 and 3 with an empty head.)

1. the call opening is forced into the prompt: `<tool_call>\\n{"name": "` — for
   "required" the model then writes the name (stop at `"`) and we take the tool it names
   (exact, else the longest shared prefix, else the first tool); a named choice forces the
   whole `{"name": "NAME", "arguments": ` head;
2. the model writes the arguments freely (with part of the token budget; a JSON reply's
   opening `{` is forced), read against the schema as they stream (`json_prefix`): what
   can still become a valid object is sent on at once; the free try is stopped where the
   object closes or strays;
3. where the free text strays from the schema (or stops short), the object is completed
   from the last point that was sure (`json_filling`): the gateway writes keys, quotes,
   commas and brackets and asks the model for each missing value.

A schema with constraints the reader cannot decide as text streams (`allOf`, patterns
with look-arounds, …; `schema_keywords.is_steerable`) is not streamed: the free try is kept
whole when it parses and validates, else the object is filled from nothing.

The callers apply the request's `stop` to a JSON reply's text (`StopCut`, `cut_at_stops`:
the text ends before the first stop string, as OpenAI's structured replies do; it still
finishes "stop"), never to a forced call's arguments.

Invariant: the arguments are always one JSON object, sent as they are decided; they validate against the schema whenever it uses only types,
enums, required properties, nesting, local references, distinguishable `anyOf` branches,
arrays with their item counts, number bounds, string lengths and the patterns
`json_patterns` spells.
"""
from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from shards.detokenizer import StopMatcher, stop_start_in

from gateway.json_filling import CanAsk, Generate, JsonText, LeafFiller
from gateway.json_prefix import JsonPrefix
from gateway.schema_keywords import is_steerable
from gateway.json_validity import is_valid   # patterns checked within a time bound (QA62)

# Like `Generate`, the generated text as it streams.
GenerateStream = Callable[[str, int, tuple[str, ...]], AsyncIterator[str]]

CALL_OPEN = '<tool_call>\n{"name": "'


def call_head(name: str) -> str:
    return f'{CALL_OPEN}{name}", "arguments": '


def choose_tool_name(generated: str, names: list[str]) -> str:
    """The tool the model named: exact match, else longest shared prefix, else the first."""
    text = generated.strip().strip('"')
    if text in names:
        return text

    def shared(name: str) -> int:
        size = 0
        while size < min(len(name), len(text)) and name[size] == text[size]:
            size += 1
        return size

    best = max(names, key=shared)
    return best if shared(best) > 0 else names[0]


def leading_json_object(text: str) -> dict | None:
    """The JSON object at the start of `text` (trailing text ignored), or None."""
    try:
        value, _ = json.JSONDecoder().raw_decode(text.lstrip())
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def free_budget(max_tokens: int) -> int:
    """Tokens for the model's free try at a JSON object: what is left once up to 256 (at
    most half) are kept for leaf filling, should the free try fail."""
    return max(1, max_tokens - min(max_tokens // 2, 256))


@dataclass(slots=True)
class StopCut:
    """The request's `stop` strings applied to a structured reply's text (a JSON reply, a
    free reply the gateway reads itself) as it comes in pieces,
    as the workers apply them to a plain reply (`shards.detokenizer`): the text ends where
    the first stop string to complete begins (the longest of those completing together).

    Invariant: `feed` returns only text no later piece can make part of a stop string (a
    tail that may begin one is held back until it cannot, or `flush` at the reply's end),
    and nothing once `stopped`; an empty stop string stops nowhere."""

    stop: tuple[str, ...] = ()
    stopped: bool = False
    _held: str = ""
    _matchers: tuple[StopMatcher, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        self._matchers = tuple(StopMatcher(stop) for stop in self.stop if stop)

    def feed(self, piece: str) -> str:
        """The text now safe to send, `piece` taken."""
        if self.stopped or not self._matchers:
            return "" if self.stopped else piece
        text = self._held + piece
        at = stop_start_in(self._matchers, piece)
        if at is not None:
            self.stopped, self._held = True, ""
            return text[:len(text) - len(piece) + at]
        cut = len(text) - max(matcher.matched for matcher in self._matchers)
        self._held = text[cut:]
        return text[:cut]

    def flush(self) -> str:
        """The text held back, at the reply's end (none once `stopped`)."""
        held, self._held = self._held, ""
        return held


async def cut_at_stops(pieces: AsyncIterator[str], stop: tuple[str, ...]) -> AsyncIterator[str]:
    """`pieces` ending before the first of the `stop` strings (`StopCut`); once one
    completes, `pieces` is closed (which stops the generations under it) and nothing more
    comes."""
    cut = StopCut(stop)
    async with contextlib.aclosing(pieces):
        async for piece in pieces:
            if text := cut.feed(piece):
                yield text
            if cut.stopped:
                return
    if held := cut.flush():
        yield held


def json_object_in(text: str) -> dict | None:
    """The first JSON object in `text` that parses from one of its first few "{"s (so
    prose or a code fence before it is skipped), or None."""
    start = text.find("{")
    for _ in range(8):
        if start < 0:
            return None
        found = leading_json_object(text[start:])
        if found is not None:
            return found
        start = text.find("{", start + 1)
    return None


def whole(generate: Generate) -> GenerateStream:
    """A stream of one piece: `generate`'s whole text."""
    async def stream(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> AsyncIterator[str]:
        yield await generate(suffix, max_tokens, stop)
    return stream


async def forced_object(schema: dict | None, generate: Generate, head: str, max_tokens: int,
                        stop: tuple[str, ...] = (), opener: str = "",
                        stream: GenerateStream | None = None, can_ask: CanAsk | None = None) -> AsyncIterator[str]:
    """A JSON object for `schema` written after `head`, yielded in pieces as they are
    decided: the model's free try (after `opener`, forced too), read as it streams and
    completed leaf by leaf from where it strayed; for a schema that is not steerable, the
    free try whole when it validates, else an object filled from nothing. `can_ask`
    (default: always) tells the filler whether `generate` may still reach the model: what
    it writes without the model goes out in few pieces (`json_filling`)."""
    schema = schema or {"type": "object", "properties": {}}
    stream = stream or whole(generate)
    out = JsonText(head)
    if not is_steerable(schema):
        free = "".join([piece async for piece in stream(head + opener, free_budget(max_tokens), stop)])
        parsed = leading_json_object(opener + free)
        if parsed is not None and is_valid(parsed, schema):
            yield json.dumps(parsed, ensure_ascii=False)
            return
        async for piece in LeafFiller(schema, generate, out, can_ask).root_object():
            yield piece
        return
    reply = JsonPrefix(schema).feed(opener)
    num_sent = 0   # the forced opener goes with the model's first text, so TTFT stays the model's
    async with contextlib.aclosing(stream(head + opener, free_budget(max_tokens), stop)) as pieces:
        async for text in pieces:
            reply.feed(text)
            if reply.num_committed > num_sent:
                yield reply.committed(num_sent)
                num_sent = reply.num_committed
            if reply.is_settled:
                break   # closing the stream stops the free try: nothing after this is used
    if reply.is_complete:
        return
    out.json = reply.committed()[:num_sent]
    frames = JsonPrefix(schema).feed(out.json).frames
    async for piece in LeafFiller(schema, generate, out, can_ask).complete(frames):
        yield piece


def forced_arguments(schema: dict | None, generate: Generate, head: str, max_tokens: int,
                     stream: GenerateStream | None = None, can_ask: CanAsk | None = None) -> AsyncIterator[str]:
    """Arguments JSON for a call whose head (`call_head(name)`) is already forced."""
    return forced_object(schema, generate, head, max_tokens, ("</tool_call>",), stream=stream, can_ask=can_ask)


def forced_json(schema: dict, generate: Generate, max_tokens: int,
                stream: GenerateStream | None = None, can_ask: CanAsk | None = None) -> AsyncIterator[str]:
    """The whole reply as a JSON object for `schema` (`response_format`); its opening
    brace is forced, or a small model starts with prose or a code fence."""
    return forced_object(schema, generate, "", max_tokens, opener="{", stream=stream, can_ask=can_ask)


async def held_to_schema(schema: dict | None, arguments: str, name: str, generate: Generate,
                         max_tokens: int) -> str:
    """A free call's `arguments` (a JSON object's text) as they are when they validate
    against `schema` (or it is None), else made valid: read against it as if the model
    were writing them now, kept up to where they stray, and completed from there
    (`forced_object`)."""
    if schema is None or is_valid(json.loads(arguments), schema):
        return arguments

    async def as_written(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> AsyncIterator[str]:
        yield arguments

    return "".join([piece async for piece in forced_object(schema, generate, call_head(name), max_tokens,
                                                             ("</tool_call>",), stream=as_written)])
