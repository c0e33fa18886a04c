"""Terminal tables: aligned columns, and every cell one printable line."""
from agents_trace.text_table import Column, printable, printable_lines, render_table


def test_numbers_align_right_text_left_and_none_is_a_dash():
    table = render_table((Column("NAME"), Column("N", True)), [("a", 5), ("long name", None), ("b", 1234)])
    assert table.splitlines() == ["NAME          N",
                                  "a             5",
                                  "long name     -",
                                  "b          1234"]


def test_control_and_format_characters_are_escaped_printable_ones_kept():
    assert printable("caf\u00e9 \u65e5\u672c") == "caf\u00e9 \u65e5\u672c"
    assert printable("a\x1b[2Jb\nc\rd\te") == "a\\x1b[2Jb\\nc\\rd\\te"
    assert printable("left\u202eright\u200b") == "left\\u202eright\\u200b"   # bidi override, zero width
    assert printable_lines("one\n\ttwo\x07\n") == ["one", "    two\\x07"]
    assert printable_lines("") == [""]


def test_a_cell_can_never_add_a_line():
    table = render_table((Column("A"), Column("B")), [("x\ny", "z\r\nw"), ("\x85", "\u2028")])
    assert len(table.splitlines()) == 3
