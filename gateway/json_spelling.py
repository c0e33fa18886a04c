"""Strings spelled from a regular expression's parse tree (`re._parser`): a character each
class admits, the shortest string the tree spells, and one of a length asked for.

`Speller(tree, cap)` knows which lengths up to `cap` each part of the tree can spell (a bit
set per part: bit n set when the part spells some string of n characters), so a string of
exactly n characters is spelled by choosing each repeat's count, each branch and each
item's length (`spell`), with no search.

Invariant: `spell(n)` returns a string of exactly n characters that the tree spells (each
repeat within its counts, each class's member, each branch's own), or raises `Unspellable`
(back-references, look-arounds, a class no candidate character meets, no string of that
length). A class is read a few times per speller, whatever its size (`_class_test`), not
once per candidate character. Whether the compiled pattern then matches it (anchors, word
boundaries, atomic groups, flags) is for the caller to check.
"""
from __future__ import annotations

import string
from bisect import bisect_right
from collections.abc import Callable, Iterator
from itertools import chain
from re import _constants as sre   # the parse tree's opcodes (stable since Python 3.11)

MAX_SPELLED_LENGTH = 1024   # a pattern whose shortest match is longer is not spelled
# characters tried first for a class, `.` or a negated literal; a class's own members
# (each range's low end, each literal) come after, so `[А-Я]` or `[😀-🙏]` are spelled too
_ASCII_CANDIDATES = "a0A_ -." + string.ascii_letters + string.digits + string.punctuation
_CATEGORIES = {
    sre.CATEGORY_DIGIT: lambda c: c.isdigit(), sre.CATEGORY_NOT_DIGIT: lambda c: not c.isdigit(),
    sre.CATEGORY_SPACE: lambda c: c.isspace(), sre.CATEGORY_NOT_SPACE: lambda c: not c.isspace(),
    sre.CATEGORY_WORD: lambda c: c.isalnum() or c == "_",
    sre.CATEGORY_NOT_WORD: lambda c: not (c.isalnum() or c == "_"),
}
_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)
_START_ANCHORS = (sre.AT_BEGINNING, sre.AT_BEGINNING_STRING)
_END_ANCHORS = (sre.AT_END, sre.AT_END_STRING)


class Unspellable(Exception):
    pass


def _class_test(items: list) -> Callable[[str], bool]:
    """Whether a character is in the class `items`, as a predicate that takes a time
    independent of the class's size (a set of literals, its ranges merged and searched by
    bisection, its distinct categories): one class of thousands of characters is tested
    against every candidate `one_char` tries. Unspellable for an item of another kind,
    whatever the character."""
    negate = bool(items) and items[0][0] is sre.NEGATE
    literals: set[int] = set()
    ranges: list[tuple[int, int]] = []
    categories = {}
    for op, value in items[1:] if negate else items:
        if op is sre.LITERAL:
            literals.add(value)
        elif op is sre.RANGE:
            ranges.append((value[0], value[1]))
        elif op is sre.CATEGORY and value in _CATEGORIES:
            categories[value] = _CATEGORIES[value]
        else:
            raise Unspellable(op)
    merged = _merged(ranges)
    lows = [low for low, _ in merged]

    def test(char: str) -> bool:
        code = ord(char)
        at = bisect_right(lows, code) - 1
        hit = (code in literals or at >= 0 and code <= merged[at][1]
               or any(accepts(char) for accepts in categories.values()))
        return hit is not negate
    return test


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ranges as disjoint ones, in ascending order, covering the same codes."""
    merged: list[tuple[int, int]] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        elif low <= high:
            merged.append((low, high))
    return merged


def _own_members(items: list) -> Iterator[str]:
    """A class's literals and each range's low end (nothing for a negated class)."""
    if items and items[0][0] is sre.NEGATE:
        return
    for op, value in items:
        if op is sre.LITERAL:
            yield chr(value)
        elif op is sre.RANGE:
            yield chr(value[0])


def one_char(op, value) -> str:
    """A character the single-character item (`op`, `value`) matches."""
    if op is sre.LITERAL:
        return chr(value)
    if op is sre.ANY:
        return "a"
    if op is sre.NOT_LITERAL:
        accepts, extra = (lambda c: c != chr(value)), iter(())
    elif op is sre.IN:
        accepts, extra = _class_test(value), _own_members(value)
    else:
        raise Unspellable(op)
    char = next((c for c in chain(_ASCII_CANDIDATES, extra) if accepts(c)), None)
    if char is None:
        raise Unspellable("no character")
    return char


def ascending_bits(mask: int):
    """The set bits of `mask`, lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def expanded_size(items, limit: int) -> int:
    """The pattern's size with each counted repeat written out (`(ab){3}` as `ababab`): what
    the `regex` module's compile takes time and memory for (`((a?){1000}){1000}` runs for
    seconds). Counting stops past `limit`."""
    total = 0
    for op, value in items:
        if op in _REPEATS:
            least, most, body = value
            total += 1 + max(1, least if most == sre.MAXREPEAT else most) * expanded_size(body, limit)
        elif op is sre.SUBPATTERN:
            total += 1 + expanded_size(value[-1], limit)
        elif op is sre.ATOMIC_GROUP:
            total += 1 + expanded_size(value, limit)
        elif op is sre.BRANCH:
            total += 1 + sum(expanded_size(branch, limit) for branch in value[1])
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            total += 1 + expanded_size(value[1], limit)
        elif op is sre.GROUPREF_EXISTS:
            total += 1 + sum(expanded_size(part, limit) for part in value[1:] if part is not None)
        else:
            total += 1
        if total > limit:
            return total
    return total


def anchored(tree) -> tuple[bool, bool]:
    """Whether the tree's top level starts with `^`/`\\A` and ends with `$`/`\\Z`."""
    items = list(tree)
    return (bool(items) and items[0][0] is sre.AT and items[0][1] in _START_ANCHORS,
            bool(items) and items[-1][0] is sre.AT and items[-1][1] in _END_ANCHORS)


def padded_tree(tree, pad: str, start: bool, end: bool) -> list:
    """The tree with any number of `pad` characters allowed before it (`start`) and after
    it (`end`): what an unanchored pattern (`re.search`) lets a longer string hold."""
    free = (sre.MAX_REPEAT, (0, sre.MAXREPEAT, [(sre.LITERAL, ord(pad))]))
    return [free] * start + [(sre.SUBPATTERN, (None, 0, 0, list(tree)))] + [free] * end


class Speller:
    """Strings a parse tree spells, of lengths up to `cap` (`MAX_SPELLED_LENGTH` at most)."""

    def __init__(self, tree, cap: int) -> None:
        self.tree, self.cap = list(tree), min(cap, MAX_SPELLED_LENGTH)
        self.mask = (1 << (self.cap + 1)) - 1
        self._lengths: dict[int, int] = {}   # id(part) -> its length bit set (parts live in `tree`)
        self._chars: dict[int, str | None] = {}   # id(class item) -> `one_char`'s, None: Unspellable
        self._longest_first = False   # how `spell` sizes a sequence's items

    def lengths(self) -> int:
        """The bit set of lengths (up to `cap`) the whole tree spells."""
        return self._sequence_lengths(self.tree)

    def _sum(self, a: int, b: int) -> int:
        """Lengths of one string of `a` followed by one of `b`."""
        if a.bit_count() < b.bit_count():
            a, b = b, a
        out = 0
        for shift in ascending_bits(b):
            out |= a << shift
        return out & self.mask

    def _sequence_lengths(self, items: list) -> int:
        key = id(items)
        if key not in self._lengths:
            total = 1
            for item in items:
                total = self._sum(total, self._item_lengths(item)) if total else 0
            self._lengths[key] = total
        return self._lengths[key]

    def _item_lengths(self, item) -> int:
        op, value = item
        if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
            return 0 if self._one_char(item) is None else 0b10
        if op is sre.AT:
            return 1
        if op is sre.SUBPATTERN:
            return self._sequence_lengths(value[-1])
        if op is sre.ATOMIC_GROUP:
            return self._sequence_lengths(value)
        if op is sre.BRANCH:
            out = 0
            for branch in value[1]:
                out |= self._sequence_lengths(branch)
            return out
        if op in _REPEATS:
            least, most, body = value
            counts = self._counts(least, most, self._sequence_lengths(body))
            out = 0
            for reachable in counts[least:]:
                out |= reachable
            return out
        raise Unspellable(op)   # back-references, look-arounds, conditionals

    def _one_char(self, item) -> str | None:
        """`one_char` of a single-character item (None where it is Unspellable), found once
        per item: a class of thousands of characters is not read again at each length."""
        key = id(item)
        if key not in self._chars:
            try:
                self._chars[key] = one_char(*item)
            except Unspellable:
                self._chars[key] = None
        return self._chars[key]

    def _counts(self, least: int, most: int, body: int, upto: int | None = None) -> list[int]:
        """Lengths of k copies of `body`, for k from 0 up to `most`, stopping where more
        copies can add no length up to `cap` (or `upto`) that fewer could not. A repeat of
        over MAX_SPELLED_LENGTH copies at least is not spelled (`(a?){10**9}`)."""
        if least > MAX_SPELLED_LENGTH:
            raise Unspellable("repeat")
        counts, limit = [1], self.cap if upto is None else upto
        while len(counts) <= most:
            k = len(counts)
            nxt = self._sum(counts[-1], body)
            if k > least and (nxt == 0 or nxt == counts[-1] or k > max(least, limit) + 1):
                break
            counts.append(nxt)
        return counts

    def spell(self, length: int, longest_first: bool = False) -> str:
        """A string of exactly `length` characters the tree spells: each item of a sequence
        as short as the rest allows (`longest_first`: as long), each repeat with its fewest
        copies, each branch its first of that length."""
        self._longest_first = longest_first
        return self._spell_sequence(self.tree, length)

    def _sizes(self, lengths: int) -> list[int]:
        sizes = list(ascending_bits(lengths))
        return sizes[::-1] if self._longest_first else sizes

    def _spell_sequence(self, items: list, length: int) -> str:
        if not self._sequence_lengths(items) >> length & 1:
            raise Unspellable(length)
        tails = [1]   # tails[j]: lengths of the last j items
        for item in reversed(items):
            tails.append(self._sum(tails[-1], self._item_lengths(item)))
        out, left = [], length
        for i, item in enumerate(items):
            after = tails[len(items) - i - 1]
            size = next(n for n in self._sizes(self._item_lengths(item)) if n <= left and after >> (left - n) & 1)
            out.append(self._spell_item(item, size))
            left -= size
        return "".join(out)

    def _spell_item(self, item, length: int) -> str:
        op, value = item
        if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
            char = self._one_char(item)
            if char is None:
                raise Unspellable(op)
            return char
        if op is sre.AT:
            return ""
        if op is sre.SUBPATTERN:
            return self._spell_sequence(value[-1], length)
        if op is sre.ATOMIC_GROUP:
            return self._spell_sequence(value, length)
        if op is sre.BRANCH:
            branch = next(b for b in value[1] if self._sequence_lengths(b) >> length & 1)
            return self._spell_sequence(branch, length)
        least, most, body = value
        body_lengths = self._sequence_lengths(body)
        counts = self._counts(least, most, body_lengths, upto=length)
        copies = next(k for k in range(least, len(counts)) if counts[k] >> length & 1)
        out, left, spelled = [], length, {}
        for done in range(copies):
            before = counts[copies - done - 1]
            size = next(n for n in ascending_bits(body_lengths) if n <= left and before >> (left - n) & 1)
            if size not in spelled:
                spelled[size] = self._spell_sequence(body, size)
            out.append(spelled[size])
            left -= size
        return "".join(out)
