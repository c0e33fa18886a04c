"""The characters a JSON schema's smallest value holds: what the filler must write for any
reply to it, whatever `max_tokens` says (a string it writes is padded to its `minLength`),
bounded at MAX_SMALLEST_CHARS (`local_schemas.local_schema` refuses a schema past it).
"""
from __future__ import annotations

from gateway.json_bounds import string_lengths
from gateway.json_counts import MAX_MINIMAL_DEPTH, ValueCounter, count_over_required, min_items
from gateway.json_heights import Heights
from gateway.json_schemas import SchemaRoot, kinds_of, value_kind
from gateway.schema_limits import text_length

# characters of strings (and listed values) a schema's smallest value holds at most: the
# value count (`json_smallest.MAX_FILLED_VALUES`) alone let 100,000 strings of `minLength`
# 100,000 through (QA134 H3: 50 MB replies for `max_tokens: 4`)
MAX_SMALLEST_CHARS = 1_000_000


class CharCounter(ValueCounter):
    """`ValueCounter`'s walk counting characters instead of values: a string part its
    `minLength`, a `const` its text, an `enum` its shortest member's, a part with a
    `default` at most the default's text, a null (a part that may be null) and other
    scalars none, an object its required properties', an array its `minItems` items'.
    Each is the least any reply holds there (a string the model writes is padded to its
    `minLength`; each `anyOf`/`oneOf` its branch with the fewest characters), at most `most`.
    A listed value's length is worked out once (a `$ref` with siblings makes a new part, not
    a new value)."""

    def __init__(self, root: SchemaRoot, heights: Heights, most: int) -> None:
        super().__init__(root, heights, most)
        self._lengths: dict[int, tuple[object, int]] = {}   # id(value or enum list) -> (it, its length)

    def _length(self, value: object, listed: bool = False) -> int:
        """`text_length(value)`, or (`listed`) its shortest member's, once per value."""
        kept = self._lengths.get(id(value))
        if kept is None or kept[0] is not value:
            length = min(text_length(member) for member in value) if listed else text_length(value)
            kept = self._lengths[id(value)] = (value, length)
        return kept[1]

    def _part_values(self, part: dict, depth: int) -> int:
        kept = self._counts.get((id(part), depth))
        if kept is not None and kept[0] is part:
            return kept[1]
        self._step()
        count = min(self.most, self._chars(part, depth))
        self._counts[(id(part), depth)] = (part, count)
        return count

    def _chars(self, part: dict, depth: int) -> int:
        if "const" in part:
            return self._length(part["const"])
        if isinstance(part.get("enum"), list) and part["enum"]:
            return self._length(part["enum"], listed=True)
        kind = value_kind(part)
        if depth >= MAX_MINIMAL_DEPTH or "null" in kinds_of(part):
            return 0
        if kind == "object":
            count = self.total(self.num_values(self.root.member_schema(part, name), depth + 1)
                               for name in part.get("required", ()))
        elif kind == "array":
            least = min_items(part)
            count = least and min(self.most, least * self.num_values(self.root.item_schema(part), depth + 1))
        else:
            count = string_lengths(part)[0] if kind == "string" else 0
        return min(count, self._length(part["default"])) if "default" in part else count


def num_chars_inside(schema: dict, heights: Heights) -> int | None:
    """The characters of strings and listed values the smallest value any reply to the
    reply object `schema` holds (`CharCounter`, over its required properties as
    `num_values_inside`), at most MAX_SMALLEST_CHARS + 1; None when the walk takes more than
    `json_counts.MAX_COUNT_STEPS` steps. A lower bound of what a reply writes, so it refuses
    no schema a reply could be written for within MAX_SMALLEST_CHARS."""
    return count_over_required(CharCounter(SchemaRoot(schema), heights, MAX_SMALLEST_CHARS + 1), schema)
