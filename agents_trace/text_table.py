"""Plain-text tables for the terminal, safe for any text a trace holds.

Invariants: every cell is one line of printable text (control characters, including
newlines and the escape that starts a terminal control sequence, are shown escaped, as
`\\n` or `\\x1b`), so a session id or tool name sent by a client can neither break a row
nor drive the terminal; numbers are right-aligned, text left-aligned; nothing is cut
short.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

NO_VALUE = "-"


@dataclass(frozen=True, slots=True)
class Column:
    """A column's heading and alignment (`is_number`: right-aligned)."""

    heading: str
    is_number: bool = False


def printable(text: object) -> str:
    """`text` as one line: each non-printable character as its escape."""
    value = str(text)
    if value.isprintable():
        return value
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
                   for ch in value)


def printable_lines(text: object) -> list[str]:
    """Multi-line `text` as its lines, each made printable (a tab as four spaces)."""
    return [printable(line.replace("\t", "    ")) for line in str(text).splitlines() or [""]]


def render_table(columns: Sequence[Column], rows: Sequence[Sequence[object]]) -> str:
    """The heading line, then one line per row; None shows as a dash."""
    cells = [[printable(NO_VALUE if value is None else value) for value in row] for row in rows]
    widths = [max([len(c.heading), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        parts = [value.rjust(width) if column.is_number else value.ljust(width)
                 for column, value, width in zip(columns, values, widths)]
        return "  ".join(parts).rstrip()

    return "\n".join([line([c.heading for c in columns]), *(line(row) for row in cells)])
