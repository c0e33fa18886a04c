"""Leaf filling: the gateway writes a JSON object's structure and asks the model for each
value, continuing the text so far (each ask is a prefix-cache hit on the prompt).

The filler writes into a `JsonText` and yields what it wrote since its last piece just
before each ask that may reach the model (the client has the text decided so far while
the model works), at each pause for the event loop, and at the end: what it writes
without the model (zero values, `minimal`, separators, brackets) goes out in a few pieces,
not one event per value. It fills a whole object from nothing (`root`), or completes one
the model began (`complete`, from the frames `json_prefix` read up to its last committed
character): it finishes an open string, gives a pending key its value, adds the required
properties not yet written (all of them when none are marked, but one whose smallest value
would not fit), takes array items while the model goes on, and closes every open bracket.

Values: strings end at the model's `"`; numbers and booleans come from a short budget,
read leniently; enums are matched by prefix; arrays get their `minItems`, then another
item while the model continues with a `,` (up to `maxItems`, at most MAX_ARRAY_ITEMS);
`anyOf`/`oneOf` with more than one branch that can end take the branch the model's next
characters start (else their first branch that is not null and can end: `Heights`). A
value the model cannot produce is its schema's default, const or first enum member that
meets the schema's other keywords, or its type's zero value (`zero_value`); objects and
arrays nested MAX_DEPTH deep or more are written without the model as the smallest value
(`minimal`): null where the schema allows it, else their required properties and
`minItems` items, each `anyOf`/`oneOf` in the branch with the fewest values (as
`json_smallest.num_values_inside` counts them). So a recursive schema (pydantic's
`sub: Optional["Node"]`) ends in its `null` by MAX_DEPTH, and its value is valid wherever
a finite one exists.
Numbers and strings are moved into their bounds and lengths (`json_bounds`); a string held
to a format (`json_formats`: a date, a UUID, …) or a `pattern` (`json_patterns`, checked
within a time bound) that the model's text does not meet together with its lengths takes a
string that meets all of them (`json_fitting.fitting_string`: the format's placeholder, or
one the pattern spells at a length within `minLength`/`maxLength`).

Invariants: what the filler writes after a committed prefix closes it into one JSON
object, valid whenever the schema uses only what `schema_keywords.is_steerable` allows
(number bounds among them: `multipleOf` where one lies within the bounds) and a finite
value meets each of its parts (`json_heights.Heights.endless` finds none). The pieces
joined are the text written, whatever `can_ask` says; once it is false (the token budget
spent) nothing is asked (each answer is "", as the model's would be). However many values
a schema needs, the filler gives the event loop its turn every PAUSE_EVERY_VALUES values
it writes (with the model or without it, `minimal`), so other requests go on and a reply
whose client left (its task cancelled) stops there; a schema needing more than
MAX_FILLED_VALUES is refused (`SchemaTooLarge`, named by the caller that knows which
parameter the schema came from; `local_schemas` refuses one whose smallest value is that
large before the reply starts). An object or array whose least structure would take the
reply past that limit is written as its smallest value instead (its null, a smaller
branch, an optional property left out), so only the model's own choices (another item, a
larger branch) can make a schema the count let through too large.
"""
from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import AsyncIterator
from typing import Any

from gateway.json_asks import (BRANCH_ASK, ENUM_ASK, LEAF_ASKS, MORE_ITEMS_ASK, STRING_REST_ASK, Ask, CanAsk,
                               Generate, JsonText)
from gateway.json_bounds import number_in_bounds, string_in_bounds
from gateway.json_fitting import fits_string
from gateway.json_formats import checked_format, normalized
from gateway.json_frames import ArrayFrame, Frame, ObjectFrame, StringFrame
from gateway.json_schemas import value_kind
from gateway.json_counts import MAX_BRANCH_STEPS, min_items
from gateway.json_smallest import SchemaTooLarge, SmallestValues

NUMBER = re.compile(r"\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")
MAX_DEPTH = 4   # levels the model is asked to fill; deeper values are written without it (`minimal`)
MAX_ARRAY_ITEMS = 8  # items a filled array gets at most (fewer when the model closes it)


def _always() -> bool:
    return True


class LeafFiller(SmallestValues):
    def __init__(self, schema: dict, generate: Generate, out: JsonText, can_ask: CanAsk | None = None) -> None:
        super().__init__(schema)
        self.generate, self.out, self.can_ask = generate, out, can_ask or _always
        self._pending: list[str] = []   # written since `out.json` was last brought up to date
        self._num_sent = len(out.json)   # characters of `out.json` yielded (a prefix the caller sent)

    def _write(self, piece: str) -> None:
        self._pending.append(piece)

    def _settled(self) -> JsonText:
        """`out` with all that was written."""
        if self._pending:
            self.out.json += "".join(self._pending)
            self._pending.clear()
        return self.out

    def _unsent(self) -> str:
        """The text written since the last piece yielded (now counted as sent)."""
        text = self._settled().json
        unsent, self._num_sent = text[self._num_sent:], len(text)
        return unsent

    def _before_ask(self) -> str:
        """The unsent text when the next ask may reach the model, so the client has it
        while the model works; else "" (it goes with a later piece)."""
        return self._unsent() if self.can_ask() else ""

    async def _ask(self, ask: Ask) -> str:
        """The model's answer to `ask`; "" without asking once `can_ask` is false."""
        if not self.can_ask():
            return ""
        return await self.generate(self._settled().text + ask.opener, ask.max_tokens, ask.stop)

    def _is_choice(self, schema: dict) -> bool:
        """Whether `schema` (resolved) is an `anyOf`/`oneOf` with more than one branch that
        some finite value meets: the model's next characters pick one (`_chosen`)."""
        branches = self.root.branches(schema)
        return bool(branches) and sum(self.heights.of(b) < math.inf for b in branches) >= 2

    def _chosen(self, schema: dict, text: str | None) -> dict:
        """`schema` (resolved) narrowed, while it is a choice, to the branch the model's
        next characters `text` start (its `null`, say), then as `_pick` narrows it."""
        for _ in range(MAX_BRANCH_STEPS):
            if not text or not self._is_choice(schema):
                break
            chosen = self.root.branch(schema, text[0])
            if chosen is None or self.heights.of(chosen) == math.inf:
                break
            schema = chosen
        return self._pick(schema)

    def root_object(self) -> AsyncIterator[str]:
        """The whole reply object, from nothing."""
        return self.complete([])

    async def complete(self, frames: list[Frame]) -> AsyncIterator[str]:
        """Close the value the frames (root first) describe, innermost first (none: the
        whole object, from nothing); the last piece is all that was not sent yet."""
        async for piece in self._closed(frames):
            yield piece
        if rest := self._unsent():
            yield rest

    async def _closed(self, frames: list[Frame]) -> AsyncIterator[str]:
        if not frames:
            self._write("{")
            async for piece in self.members(self.root.resolve(self.schema), 1, []):
                yield piece
            return
        child_done = False   # whether the frame just above was a value now closed
        for depth in range(len(frames), 0, -1):
            frame = frames[depth - 1]
            if isinstance(frame, StringFrame):
                if sent := self._before_ask():
                    yield sent
                rest = string_in_bounds(await self._ask(STRING_REST_ASK), frame.schema, written=frame.length)
                self._write(json.dumps(rest, ensure_ascii=False)[1:])
            elif isinstance(frame, ObjectFrame):
                seen = list(frame.seen)
                if frame.phase == "value":
                    if not child_done:
                        async for piece in self.value(self.root.member_schema(frame.schema, frame.key), depth):
                            yield piece
                    seen.append(frame.key)
                async for piece in self.members(frame.schema, depth, seen):
                    yield piece
            elif isinstance(frame, ArrayFrame):
                count = frame.count
                if frame.phase == "value":
                    if not child_done:
                        async for piece in self.value(self.root.item_schema(frame.schema), depth):
                            yield piece
                    count += 1
                async for piece in self.items(frame.schema, depth, count):
                    yield piece
            child_done = True

    async def members(self, schema: dict, depth: int, seen: list[str]) -> AsyncIterator[str]:
        """The required properties not in `seen` (all properties when none are marked
        required, but one whose smallest value would take the reply past MAX_FILLED_VALUES:
        it is left out), then `}`."""
        properties: dict = schema.get("properties", {})
        required = schema.get("required")
        for name in required or list(properties):
            if name in seen or not required and not self.fits(self.num_values(self.root.member_schema(schema, name))):
                continue
            self._write(("" if not seen else ", ") + json.dumps(name) + ": ")
            async for piece in self.value(self.root.member_schema(schema, name), depth):
                yield piece
            seen.append(name)
        self._write("}")

    async def items(self, schema: dict, depth: int, count: int) -> AsyncIterator[str]:
        """Items after the `count` already written: up to `minItems` always, then another
        while the model continues the list, `maxItems` (at most MAX_ARRAY_ITEMS) allows
        and its smallest value fits (QA89: one too large ends the list, as an optional
        property too large is left out); then `]`."""
        item_schema = self.root.item_schema(schema)
        least = max(0, int(schema.get("minItems", 0)))
        most = max(least, min(int(schema.get("maxItems", MAX_ARRAY_ITEMS)), MAX_ARRAY_ITEMS))
        while count < most:
            if count >= least:
                if not self.fits(self.num_values(item_schema)):
                    break
                if sent := self._before_ask():
                    yield sent
                after = (await self._ask(MORE_ITEMS_ASK)).lstrip()
                if not after or (count and not after.startswith(",")):
                    break
            if count:
                self._write(", ")
            async for piece in self.value(item_schema, depth):
                yield piece
            count += 1
        self._write("]")

    async def value(self, schema: dict, depth: int) -> AsyncIterator[str]:
        """One value for `schema`, continuing the text so far: shallower than MAX_DEPTH in
        the `anyOf`/`oneOf` branch the model starts, from MAX_DEPTH on in the smallest one (so
        a recursive schema's nesting ends there, in its `null`). An object or array whose
        structure would take the reply past MAX_FILLED_VALUES is the smallest value instead
        (`minimal`: a null or smaller branch where there is one, else refused)."""
        if self._count_value():   # the loop's turn: other requests, and a cancel when the client left
            if sent := self._unsent():
                yield sent
            await asyncio.sleep(0)
        if depth < MAX_DEPTH:
            whole, text = self.root.resolve(schema), None
            if self._is_choice(whole):
                if sent := self._before_ask():
                    yield sent
                text = (await self._ask(BRANCH_ASK)).lstrip()
            schema = self._chosen(whole, text)
            if not self.fits(self._structure_values(schema) - 1):   # this value is counted already
                if not self.fits(self.num_values(whole) - 1):   # no smaller choice: refused at once
                    raise SchemaTooLarge.of(self.schema)
                self._num_values -= 1   # `minimal` counts it again
                self._write(json.dumps(await self.minimal(whole), ensure_ascii=False))
                return
        else:
            schema = self._pick(schema, smallest=True)
        kind = value_kind(schema)
        if "const" not in schema and not schema.get("enum") and depth < MAX_DEPTH and kind in ("object", "array"):
            self._write("{" if kind == "object" else "[")
            pieces = self.members(schema, depth + 1, []) if kind == "object" else self.items(schema, depth + 1, 0)
            async for piece in pieces:
                yield piece
            return
        ask, text = self._leaf_ask(schema, kind), None
        if ask is not None:
            if sent := self._before_ask():
                yield sent
            text = await self._ask(ask)
        self._write(json.dumps(await self.leaf(schema, kind, text), ensure_ascii=False))

    def _structure_values(self, schema: dict) -> int:
        """The fewest values the filler writes for `schema` (resolved, narrowed) as an
        object or array, itself included (`num_values` of each required property or
        `minItems` item, 0 where unknown); 1 for any other value."""
        kind = value_kind(schema)
        if "const" in schema or schema.get("enum") or kind not in ("object", "array"):
            return 1
        if kind == "object":
            return 1 + sum(self.num_values(self.root.member_schema(schema, name), 1) or 0
                           for name in schema.get("required") or ())
        least = min_items(schema)
        return 1 + (least and least * (self.num_values(self.root.item_schema(schema), 1) or 0))

    def _leaf_ask(self, schema: dict, kind: str) -> Ask | None:
        """What `leaf` asks the model for `schema`'s value (None: it is written without it)."""
        if "const" in schema or self.root.branches(schema):
            return None
        return ENUM_ASK if schema.get("enum") else LEAF_ASKS.get(kind)

    async def leaf(self, schema: dict, kind: str, text: str | None) -> Any:
        """`schema`'s value from `text`, the model's answer to `_leaf_ask` (None where
        nothing was asked)."""
        if "const" in schema:
            return schema["const"]
        if self.root.branches(schema):   # an `anyOf` kept whole for its `default`
            return await self.minimal(schema)
        if schema.get("enum"):
            text = text.strip()
            options = zip(self.root.options(schema), self.root.listed(schema))   # as the reader serializes them
            return next((option for dumped, option in options if text and dumped.startswith(text[:len(dumped)])),
                        self.zero(schema))
        if kind == "string":
            fmt = checked_format(schema)
            if fmt is not None:
                value = normalized(text, fmt)
                return value if value is not None and fits_string(value, schema) else self.zero(schema)
            pattern = self.root.pattern(schema)   # compiled and spelled once per part
            if pattern is not None:   # the model's text, else cut or padded to the lengths, if it still matches
                return next((value for value in (text, string_in_bounds(text, schema))
                             if fits_string(value, schema, pattern)), self.zero(schema))
            return string_in_bounds(text, schema)
        if kind in ("integer", "number"):
            match = NUMBER.match(text)
            number = float(match.group(1)) if match is not None else math.nan
            if not math.isfinite(number):   # none, or past a float ("1e999"): JSON has no Infinity
                return self.zero(schema)
            return number_in_bounds(int(number) if kind == "integer" else number, schema, integer=kind == "integer")
        if kind == "boolean":
            text = text.strip().lower()
            return True if text.startswith("t") else False if text.startswith("f") else self.zero(schema)
        return await self.minimal(schema)
