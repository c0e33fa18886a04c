"""How deep the smallest value of each part of a reply's JSON schema is: `Heights` (which
`anyOf` branch ends a recursive schema soonest, for the filler; `too_high`: a part no
finite value meets, or one nested past MAX_SMALLEST_HEIGHT, refused up front by
local_schemas.py).

Invariant: computed iteratively over the parts reachable from the root (local `$ref`s
resolved by `SchemaRoot`), never by recursion, so a long chain of `$defs` cannot exhaust
the stack.
"""
from __future__ import annotations

import heapq
import math
from collections import deque

from gateway.json_schemas import SchemaRoot, kinds_of, value_kind

MAX_SMALLEST_HEIGHT = 64   # levels the filler writes a part's smallest value to (`json_smallest.SmallestValues.minimal`)


class Heights:
    """How soon each part of a schema can end: the height of the smallest value the filler
    writes for it without the model (`json_smallest.SmallestValues.minimal`). A scalar, a null
    (a part whose `type` list takes one) and a value the schema names (`default`, `const`,
    `enum`) are 0 high; an object is 1 above its highest required property, an array 1
    above its item where `minItems` asks for one (else 1); an `anyOf`/`oneOf` is as high as
    its lowest branch. A part no finite value meets (a required property that refers back
    to its own object, with no null or other branch to end on) is infinitely high.

    Invariant: the heights are the least ones the rules allow, over every part reachable
    from the document's root, found once, lowest first (Knuth's generalization of
    Dijkstra's shortest paths: O(parts · log parts), whatever the schema): so a part's
    smallest value, taking at each step a branch and members no higher than the part, is
    at most its height deep, and writing it ends.
    """

    def __init__(self, root: SchemaRoot) -> None:
        self.root = root
        self._parts: list[tuple[dict, dict, str]] = []   # (part as written, resolved, where), root first
        self._heights: dict[int, float] = {}   # by the id of a part as written in the document
        self._walk()
        self._settle()

    def of(self, schema: object, depth: int = 0) -> float:
        """The height of `schema`, a part of the document or one resolved from it (a part
        the root does not reach, read 16 levels deep at most, is taken as endless there)."""
        if not isinstance(schema, dict):
            return 0
        height = self._heights.get(id(schema))
        if height is not None or depth > 16:
            return math.inf if height is None else height
        how, parts, base = _shape(self.root.resolve(schema))
        heights = [self.of(part, depth + 1) for part in parts]
        return base if how == "leaf" else min(heights) if how == "min" else base + max(heights, default=0)

    def too_high(self) -> tuple[str, float] | None:
        """Where the first part (root first) whose smallest value is higher than
        MAX_SMALLEST_HEIGHT is, and its height (inf for an endless part), or None."""
        return next(((place, self._heights[id(part)]) for part, _, place in self._parts
                     if self._heights[id(part)] > MAX_SMALLEST_HEIGHT), None)

    def _walk(self) -> None:
        queue: deque[tuple[dict, str]] = deque([(self.root.document, "")])
        while queue:
            part, place = queue.popleft()
            if id(part) in self._heights:
                continue
            view = self.root.resolve(part)
            self._heights[id(part)] = math.inf
            self._parts.append((part, view, place))
            ref = part.get("$ref")
            if view is not part and isinstance(ref, str):   # its parts are where the reference points
                place = ".".join(p for p in ref[1:].split("/") if p)
            for label, child in _parts_of(view):
                queue.append((child, f"{place}.{label}" if place else label))

    def _settle(self) -> None:
        """Each part's height, lowest first: a "min" part is settled by its first settled
        branch, a "max" part once all its members are (by the last, the highest)."""
        heights, rules = self._heights, {}
        users: dict[int, list[int]] = {}   # part -> the parts whose rule reads it (once per mention)
        waiting: dict[int, int] = {}   # "max" part -> members not settled yet
        queue: list[tuple[float, int]] = []
        for part, view, _ in self._parts:
            how, parts, base = _shape(view)
            rules[id(part)] = how, base
            mentioned = [id(child) for child in parts if isinstance(child, dict) and id(child) in heights]
            for child in mentioned:
                users.setdefault(child, []).append(id(part))
            if how == "max":
                waiting[id(part)] = len(mentioned)
            if how == "leaf" or how == "max" and not mentioned:   # members outside the parts are 0 high
                heapq.heappush(queue, (base, id(part)))
        while queue:
            height, key = heapq.heappop(queue)
            if heights[key] != math.inf:
                continue
            heights[key] = height
            for user in users.get(key, ()):
                how, base = rules[user]
                if how == "min":
                    heapq.heappush(queue, (height, user))
                else:
                    waiting[user] -= 1
                    if not waiting[user]:
                        heapq.heappush(queue, (base + height, user))


def _shape(view: dict) -> tuple[str, list, int]:
    """How a resolved part's height follows from its parts: ("leaf", [], its height),
    ("min", branches, 0): its lowest branch's, or ("max", members, 1): 1 above its highest
    member's (a member that is not a schema is 0 high)."""
    if "default" in view:
        return "leaf", [], 0
    branches = _branches_of(view)
    if branches:
        return "min", branches, 0
    kind = value_kind(view)
    if "const" in view or view.get("enum") or kind not in ("object", "array") or "null" in kinds_of(view):
        return "leaf", [], 0
    if kind == "object":
        properties, required = view.get("properties"), view.get("required")
        if not isinstance(properties, dict) or not isinstance(required, list):
            return "leaf", [], 1
        return "max", [properties.get(name) for name in required], 1
    least = view.get("minItems", 0)
    return ("max", [view.get("items")], 1) if isinstance(least, int) and least > 0 else ("leaf", [], 1)


def _branches_of(view: dict) -> list[dict]:
    options = view.get("anyOf", view.get("oneOf"))
    return [option for option in options if isinstance(option, dict)] if isinstance(options, list) else []


def _parts_of(view: dict):
    """(label, subschema) for each part the reader or the filler may step into from `view`."""
    properties = view.get("properties")
    if isinstance(properties, dict):
        for name, child in properties.items():
            if isinstance(child, dict):
                yield f"properties.{name}", child
    if isinstance(view.get("items"), dict):
        yield "items", view["items"]
    keyword = "anyOf" if "anyOf" in view else "oneOf"
    for index, option in enumerate(view.get(keyword) if isinstance(view.get(keyword), list) else ()):
        if isinstance(option, dict):
            yield f"{keyword}[{index}]", option
