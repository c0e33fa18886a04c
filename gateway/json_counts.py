"""How many values a JSON Schema's smallest value holds (`ValueCounter`): what
`json_smallest.num_values_inside` refuses up front and what `SmallestValues` takes the
fewest of at each `anyOf`/`oneOf` (one definition of "smallest" for both).

Invariants: a count is the fewest values any filler writes for a part (each object, array
and scalar one; a part MAX_MINIMAL_DEPTH deep one), at most `most`; a walk takes at most
MAX_COUNT_STEPS steps (then `Undecided`), and a part seen at the same depth is counted once.
"""
from __future__ import annotations

import math
from itertools import chain

from gateway.json_heights import MAX_SMALLEST_HEIGHT, Heights
from gateway.json_schemas import SchemaRoot, kinds_of, value_kind

# a `minimal` value this deep is its zero: never for a part `local_schemas` lets through
MAX_MINIMAL_DEPTH = MAX_SMALLEST_HEIGHT
MAX_BRANCH_STEPS = 16     # nested anyOf/oneOf narrowed at most (a branch that is the anyOf itself goes no further)
MAX_COUNT_STEPS = 20_000  # parts a count visits at most before it gives no verdict (~tens of ms)


class Undecided(Exception):
    """The count took more than MAX_COUNT_STEPS steps."""


class ValueCounter:
    """`json_smallest.num_values_inside`'s walk: depth first, a part seen at the same depth
    counted once; a count is at most `most` (one over the limit)."""

    def __init__(self, root: SchemaRoot, heights: Heights, most: int) -> None:
        self.root, self.heights, self.most = root, heights, most
        self._num_steps = 0
        self._counts: dict[tuple[int, int], tuple[dict, int]] = {}   # (id(part), depth) -> (part, count)

    def _step(self) -> None:
        self._num_steps += 1
        if self._num_steps > MAX_COUNT_STEPS:
            raise Undecided

    def counted(self, schema: dict, depth: int) -> int:
        """`num_values`, with MAX_COUNT_STEPS steps of its own (parts counted before are not
        counted again)."""
        self._num_steps = 0
        return self.num_values(schema, depth)

    def fresh_ways(self, schema: dict) -> list[dict]:
        """`ways`, with MAX_COUNT_STEPS steps of its own."""
        self._num_steps = 0
        return self.ways(schema)

    def total(self, counts) -> int:
        """The sum of `counts` (an iterable, read only while the sum is at most `most` - 1),
        at most `most`."""
        total = 0
        for count in counts:
            total += count
            if total >= self.most:
                return self.most
        return total

    def num_values(self, schema: dict, depth: int) -> int:
        """The fewest values `schema`'s value may hold, itself included (at most `most`)."""
        return min(self._part_values(part, depth) for part in self.ways(schema))

    def ways(self, schema: dict) -> list[dict]:
        """The parts `schema` may be written as: itself, or (an `anyOf`/`oneOf` without a
        `default`) its branches, through nested ones MAX_BRANCH_STEPS deep; those some finite
        value meets where there are any (all resolved)."""
        found: dict[int, dict] = {}
        choices = {0: self.root.resolve(schema)}
        for _ in range(MAX_BRANCH_STEPS):
            branched: dict[int, dict] = {}
            for part in choices.values():
                branches = self.root.branches(part)
                if not branches or "default" in part:
                    found.setdefault(id(part), part)
                for branch in branches if branches and "default" not in part else ():
                    self._step()
                    branched.setdefault(id(branch), branch)
            choices = branched
            if not choices:
                break
        ways = list(found.values()) + list(choices.values())
        return [part for part in ways if self.heights.of(part) < math.inf] or ways

    def _part_values(self, part: dict, depth: int) -> int:
        kind = value_kind(part)
        if (kind not in ("object", "array") or "default" in part or "const" in part or part.get("enum")
                or depth >= MAX_MINIMAL_DEPTH or "null" in kinds_of(part)):
            return 1
        kept = self._counts.get((id(part), depth))
        if kept is not None and kept[0] is part:
            return kept[1]
        self._step()
        if kind == "object":
            count = self.total(chain((1,), (self.num_values(self.root.member_schema(part, name), depth + 1)
                                            for name in part.get("required", ()))))
        else:
            least = min_items(part)
            count = 1 + (least and min(self.most, least * self.num_values(self.root.item_schema(part), depth + 1)))
        count = min(count, self.most)
        self._counts[(id(part), depth)] = (part, count)
        return count


def min_items(part: dict) -> int:
    """`minItems` as a count (0 where it is none)."""
    least = part.get("minItems", 0)
    if isinstance(least, bool) or not isinstance(least, (int, float)) or not math.isfinite(least):
        return 0
    return max(0, int(least))


def count_over_required(counter: ValueCounter, schema: dict) -> int | None:
    """What `counter` counts over the reply object `schema`'s required properties (its
    smallest value holds those only), at most `counter.most`; None when undecided (more
    than MAX_COUNT_STEPS steps)."""
    root = counter.root.resolve(schema)
    try:
        return counter.total(counter.num_values(counter.root.member_schema(root, name), 1)
                             for name in root.get("required", ()))
    except Undecided:
        return None
