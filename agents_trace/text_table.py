"""Plain-text tables for the terminal, safe for any text a trace holds.

Invariants: every cell is one line of printable text (control characters, including
newlines and the escape that starts a terminal control sequence, are shown escaped, as
`\\n` or `\\x1b`), so a session id or tool name sent by a client can neither break a row
nor drive the terminal; numbers are right-aligned, text left-aligned, by the columns a
terminal gives each character (two for a wide one: CJK, most emoji; none for a combining
mark), so the columns line up whatever the text; nothing is cut short. `terminal_json`
gives JSON the same safety: the characters `printable` escapes come as `\\uXXXX`.
"""
from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

NO_VALUE = "-"


@dataclass(frozen=True, slots=True)
class Column:
    """A column's heading and alignment (`is_number`: right-aligned)."""

    heading: str
    is_number: bool = False


def counted(number: int, noun: str) -> str:
    """`number` and `noun`, plural unless one: "1 step", "2 steps", "0 sessions"."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def printable(text: object) -> str:
    """`text` as one line: each non-printable character as its escape."""
    value = str(text)
    if value.isprintable():
        return value
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
                   for ch in value)


def display_width(text: str) -> int:
    """The terminal columns `text` (printable) takes: two for each East Asian wide or
    full-width character, none for a combining mark, one for the rest."""
    if text.isascii():
        return len(text)
    return sum(0 if unicodedata.combining(ch) or unicodedata.category(ch) == "Me" else
               2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def _json_escape(ch: str) -> str:
    """`ch` as JSON's `\\uXXXX` (a surrogate pair past the Basic Multilingual Plane)."""
    code = ord(ch)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def terminal_json(value: object) -> str:
    """`value` as one JSON line, non-ASCII text kept as it is but for the characters
    `printable` escapes (controls, C1, bidirectional and other format characters, lone
    surrogates), which come as `\\uXXXX`: the same JSON, safe on a terminal."""
    text = json.dumps(value, ensure_ascii=False)   # escapes C0 controls and quotes already
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _json_escape(ch) for ch in text)


def _padded(value: str, width: int, *, right: bool) -> str:
    padding = " " * (width - display_width(value))
    return padding + value if right else value + padding


def printable_lines(text: object) -> list[str]:
    """Multi-line `text` as its lines, each made printable (a tab as four spaces)."""
    return [printable(line.replace("\t", "    ")) for line in str(text).splitlines() or [""]]


def render_table(columns: Sequence[Column], rows: Sequence[Sequence[object]]) -> str:
    """The heading line, then one line per row; None shows as a dash."""
    cells = [[printable(NO_VALUE if value is None else value) for value in row] for row in rows]
    widths = [max([display_width(c.heading), *(display_width(row[i]) for row in cells)])
              for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        parts = [_padded(value, width, right=column.is_number)
                 for column, value, width in zip(columns, values, widths)]
        return "  ".join(parts).rstrip()

    return "\n".join([line([c.heading for c in columns]), *(line(row) for row in cells)])
