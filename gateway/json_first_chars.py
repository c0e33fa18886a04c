"""The characters a value of each schema part may start with, for every part reachable
from one through `anyOf`/`oneOf` branches, found in one walk (`SchemaRoot.first_chars`).

A part's first characters are its own (its listed values', or its types') together with
those of the parts it branches to. Parts reach each other along many paths (an `anyOf`
whose two branches are the same `$ref`, nested D deep, has 2^D paths: QA134 H1) and in
cycles (a branch that refers back to the `anyOf` it is in): the walk looks at each part
once, and the parts of a cycle share the characters of all of them (Tarjan's strongly
connected components, walked from a stack of parts to visit, never by recursion, so a
long chain of `$defs` cannot exhaust the stack).

Invariant: `first_chars_of(start, step)` gives, for `start` and each part reached from it,
the set of characters (as a sorted string) that is the union of the own characters
`step` names for every part reachable from it, itself included: what recursing into each
branch would give where there is no cycle, in time linear in the parts and branches.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

# a part's own first characters and the parts it branches to
Step = Callable[[dict], tuple[str, list[dict]]]


def first_chars_of(start: dict, step: Step) -> Iterator[tuple[dict, str]]:
    """(part, its first characters) for `start` and every part reached from it, each once
    (see the module's invariant)."""
    order: dict[int, int] = {}   # id(part) -> when the walk first reached it
    lowest: dict[int, int] = {}   # id(part) -> the earliest part on the stack it leads back to
    chars: dict[int, set[str]] = {}   # id(part) -> the characters found for it so far
    on_stack: list[dict] = []   # parts whose component is not closed yet
    open_ids: set[int] = set()   # their ids
    walk: list[tuple[dict, Iterator[dict]]] = []   # the parts being walked, each with its branches left

    def reach(part: dict) -> None:
        own, branches = step(part)
        order[id(part)] = lowest[id(part)] = len(order)
        chars[id(part)] = set(own)
        on_stack.append(part)
        open_ids.add(id(part))
        walk.append((part, iter(branches)))

    reach(start)
    while walk:
        part, branches = walk[-1]
        key = id(part)
        for branch in branches:
            if id(branch) not in order:
                reach(branch)
                break
            if id(branch) in open_ids:   # back to a part of this component: its characters come up the walk
                lowest[key] = min(lowest[key], order[id(branch)])
            else:   # a closed component: its characters are whole
                chars[key] |= chars[id(branch)]
        else:
            walk.pop()
            if lowest[key] == order[key]:   # `part` heads a component: close it, all of it sharing its characters
                found = "".join(sorted(chars[key]))
                while True:
                    member = on_stack.pop()
                    open_ids.discard(id(member))
                    chars[id(member)] = chars[key]
                    yield member, found
                    if member is part:
                        break
            if walk:
                parent = id(walk[-1][0])
                lowest[parent] = min(lowest[parent], lowest[key])
                chars[parent] |= chars[key]
