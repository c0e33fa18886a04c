"""A JSON Schema's smallest valid value, written without the model (what the leaf filler,
gateway/json_filling.py, writes past MAX_DEPTH and where the model cannot go on), and the
bound on how many values one reply writes.

Invariants: `minimal` is valid wherever a finite value meets the schema (`Heights`) and no
deeper than MAX_MINIMAL_DEPTH, and its values are those `num_values_inside` counts for it
(one definition of "smallest": each choice the branch with the fewest values, `_fewest`);
a filler that counts more than MAX_FILLED_VALUES values raises `SchemaTooLarge` (the
caller names the parameter); `minimal` gives the event loop its turn every
PAUSE_EVERY_VALUES values. `num_values_inside` (what
`local_schemas` refuses up front) is never more than the values a filler counts filling
the reply object from nothing, whatever the model answers: it refuses no schema the
filler could fill.
"""
from __future__ import annotations

import asyncio
import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from gateway.errors import ApiError
from gateway.json_bounds import number_in_bounds
from gateway.json_fitting import fitting_member, fitting_string
from gateway.json_counts import MAX_BRANCH_STEPS, MAX_MINIMAL_DEPTH, Undecided, ValueCounter, count_over_required
from gateway.json_heights import Heights
from gateway.json_schemas import SchemaRoot, kinds_of, value_kind

# values one reply's filler writes at most: a schema whose smallest value is larger (a huge
# `minItems`, required properties each requiring two more, many levels deep) is refused
# there, as a 400 or the stream's error event, instead of being built for ever
MAX_FILLED_VALUES = 100_000
PAUSE_EVERY_VALUES = 64   # values written between the event loop's turns (tens of µs each)


@dataclass(slots=True)
class SchemaTooLarge(ApiError):
    """The 400 for a schema whose smallest valid value has more than MAX_FILLED_VALUES
    values; `schema` is the one being filled, so the caller names the parameter it came
    from (`named`)."""

    schema: dict | None = None

    @classmethod
    def of(cls, schema: dict) -> "SchemaTooLarge":
        return cls(400, f"The JSON Schema's smallest valid value is too large to write (over "
                   f"{MAX_FILLED_VALUES} values: a large `minItems`, or required properties that each "
                   "require more, many levels deep).", "invalid_request_error", "invalid_value", schema=schema)

    def named(self, param: str | None) -> ApiError:
        return ApiError(self.status, self.message, self.type, self.code, param, dict(self.headers))


def zero_value(schema: dict) -> Any:
    """A schema-valid placeholder: the default, const or first enum member that meets the
    schema's other keywords (`json_fitting`), else the type's zero (a number moved into the
    schema's bounds, `json_bounds`; a string meeting its format, pattern and lengths,
    `fitting_string`). A const or enum none of whose members meets the rest gives its
    first member all the same."""
    found, value = fitting_member(schema)
    if found:
        return value
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = value_kind(schema)
    if kind in ("integer", "number"):
        return number_in_bounds(0, schema, integer=kind == "integer")
    if kind == "string":
        return fitting_string(schema)
    return {"boolean": False, "array": [], "object": {}, "null": None}.get(kind, None)


class SmallestValues:
    """A schema's values written without the model: each `anyOf`/`oneOf` narrowed
    (`_pick`), the smallest value (`minimal`), and the count of values written, which
    bounds a reply's work (MAX_FILLED_VALUES) and paces the event loop's turns."""

    def __init__(self, schema: dict) -> None:
        self.schema, self.root = schema, SchemaRoot(schema)
        self._heights: Heights | None = None   # found when a branch is first picked
        self._num_values = 0   # values written so far (`_count_value`)
        self._zeros: dict[int, tuple[dict, Any]] = {}   # id(schema) -> (schema, its `zero_value`)
        self._counter: ValueCounter | None = None   # made when a count is first needed
        self._undecided = False   # whether a count gave no verdict (`num_values`)

    def zero(self, schema: dict) -> Any:
        """`zero_value(schema)`, worked out once per schema part (a string's spelling
        takes a fraction of a millisecond; a reply may write MAX_FILLED_VALUES of them)."""
        kept = self._zeros.get(id(schema))
        if kept is None or kept[0] is not schema:
            kept = self._zeros[id(schema)] = (schema, zero_value(schema))
        return kept[1]

    def _count_value(self) -> bool:
        """One more value written; past MAX_FILLED_VALUES the schema is refused. True
        every PAUSE_EVERY_VALUES values: the event loop's turn is due."""
        self._num_values += 1
        if self._num_values > MAX_FILLED_VALUES:
            raise SchemaTooLarge.of(self.schema)
        return self._num_values % PAUSE_EVERY_VALUES == 0

    @property
    def heights(self) -> Heights:
        if self._heights is None:
            self._heights = Heights(self.root)
        return self._heights

    @property
    def counter(self) -> ValueCounter:
        if self._counter is None:
            self._counter = ValueCounter(self.root, self.heights, MAX_FILLED_VALUES + 1)
        return self._counter

    def num_values(self, schema: dict, depth: int = 0) -> int | None:
        """The values `schema`'s smallest value holds, as `num_values_inside` counts them
        (at most MAX_FILLED_VALUES + 1); None where that count gives no verdict (then never
        again for this reply: what is written no longer depends on it)."""
        if self._undecided:
            return None
        try:
            return self.counter.counted(schema, depth)
        except Undecided:
            self._undecided = True
            return None

    def fits(self, num_values: int | None) -> bool:
        """Whether `num_values` more values (None: unknown) keep the reply within MAX_FILLED_VALUES."""
        return num_values is None or self._num_values + num_values <= MAX_FILLED_VALUES

    def _pick(self, schema: dict, smallest: bool = False, depth: int = 0) -> dict:
        """`schema` resolved, an `anyOf`/`oneOf` narrowed (through nested ones) to one
        branch: its first non-null branch that some finite value meets, or (`smallest`, or
        when there is none) the first non-null of its lowest branches (`Heights`: null,
        where it is one), but with `smallest` (a part `depth` levels into a smallest value)
        one with fewer values where there is one (`_fewest`). With `smallest`, one with a
        `default` stays whole: the default is its smallest value."""
        choice = schema = self.root.resolve(schema)
        for _ in range(MAX_BRANCH_STEPS):
            branches = self.root.branches(schema)
            if not branches or smallest and "default" in schema:
                break
            heights = [self.heights.of(branch) for branch in branches]
            pick = None if smallest else next(
                (b for b, h in zip(branches, heights) if h < math.inf and value_kind(b) != "null"), None)
            if pick is None:
                lowest = [b for b, h in zip(branches, heights) if h == min(heights)]
                pick = next((b for b in lowest if value_kind(b) != "null"), lowest[0])
            schema = pick
        return self._fewest(choice, schema, depth) if smallest and schema is not choice else schema

    def _fewest(self, choice: dict, lowest: dict, depth: int) -> dict:
        """Of the parts the choice `choice` may be written as (`ValueCounter.ways`, those
        `num_values_inside` takes the fewest of), `lowest` (its lowest branch) where none has
        fewer values, else the first with the fewest, then the lowest (`Heights`), then not
        null; only those that end before MAX_MINIMAL_DEPTH from `depth`, so the value stays
        valid. `lowest` where the count gives no verdict."""
        if self._undecided:
            return lowest
        try:
            ways = self.counter.fresh_ways(choice)
        except Undecided:
            self._undecided = True
            return lowest
        ending = [way for way in ways if depth + self.heights.of(way) <= MAX_MINIMAL_DEPTH]
        counts = [self.num_values(way, depth) for way in ending]
        least = self.num_values(lowest, depth)
        if None in counts or least is None or not ending or least <= min(counts):
            return lowest
        return min(zip(ending, counts), key=lambda pair: (
            pair[1], self.heights.of(pair[0]), value_kind(pair[0]) == "null"))[0]

    async def minimal(self, schema: dict) -> Any:
        """The smallest value for `schema`, written without the model (`_smallest`), giving
        the event loop its turn every PAUSE_EVERY_VALUES values."""
        steps = self._smallest(schema)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value
            await asyncio.sleep(0)

    def _smallest(self, schema: dict, depth: int = 0) -> Generator[None, None, Any]:
        """The smallest value for `schema` (returned), written without the model: `zero_value`,
        null for an object or array that may be null, else for an object its required
        properties and for an array its `minItems` items, each minimal. Each `anyOf`/`oneOf`
        takes its branch with the fewest values of those that end in time (`_fewest`, as
        `num_values_inside` counts), so the value is no deeper than MAX_MINIMAL_DEPTH and
        valid wherever some finite value is. Yields (nothing) where the loop's turn is due."""
        if self._count_value():
            yield
        schema = self._pick(schema, smallest=True, depth=depth)
        kind = value_kind(schema)
        if (kind not in ("object", "array") or "default" in schema or "const" in schema or schema.get("enum")
                or depth >= MAX_MINIMAL_DEPTH):
            return self.zero(schema)
        if "null" in kinds_of(schema):
            return None
        if kind == "object":
            members = {}
            for name in schema.get("required", ()):
                members[name] = yield from self._smallest(self.root.member_schema(schema, name), depth + 1)
            return members
        item_schema = self.root.item_schema(schema)
        items = []
        for _ in range(max(0, int(schema.get("minItems", 0)))):
            items.append((yield from self._smallest(item_schema, depth + 1)))
        return items


def num_values_inside(schema: dict, heights: Heights) -> int | None:
    """How many values the smallest value the filler could write for the reply object
    `schema` holds inside it (as `SmallestValues` counts them: each object, array and scalar
    one), at most MAX_FILLED_VALUES + 1; None when that takes more than
    `json_counts.MAX_COUNT_STEPS` steps. `heights` are those of `schema`'s parts.

    A lower bound of what any filler counts: the root's required properties only (the
    filler leaves out an optional one whose smallest value would not fit), each
    `anyOf`/`oneOf` in its branch with the fewest values (of those some finite value meets), each array its `minItems`
    items, a part naming its value (`default`, `const`, `enum`), a scalar, a null, and a part
    MAX_MINIMAL_DEPTH deep (where `minimal` ends a recursive schema) one value."""
    return count_over_required(ValueCounter(SchemaRoot(schema), heights, MAX_FILLED_VALUES + 1), schema)
