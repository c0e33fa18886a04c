"""Table columns line up on a terminal whatever the text: widths are terminal columns
(two for a wide CJK character or emoji, none for a combining mark), not characters."""
from __future__ import annotations

import unicodedata

from agents_trace.text_table import Column, render_table


def _columns_at(line: str) -> int:
    """The terminal column where `line` ends (as a terminal draws it)."""
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
               for ch in line)


def test_display_width_counts_terminal_columns():
    from agents_trace.text_table import display_width

    assert display_width("abc") == 3
    assert display_width("会话") == 4 and display_width("🚀") == 2
    assert display_width("e\u0301") == 1   # e and a combining acute accent


def test_cells_after_wide_text_start_in_the_same_column():
    rows = [["beta-🚀-会话", "planner", 12], ["plain-id", "coder", 3], ["cafe\u0301", "x", 100]]
    lines = render_table([Column("SESSION"), Column("AGENT"), Column("STEPS", is_number=True)], rows).splitlines()
    agent_at = lines[0].index("AGENT")
    for line, agent in zip(lines[1:], ("planner", "coder", "x")):
        assert _columns_at(line[:line.index(agent)]) == agent_at, line
    assert len({_columns_at(line) for line in lines}) == 1   # right-aligned numbers end together
