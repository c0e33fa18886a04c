"""/ui's timeline marks each escape it writes, as the steps table does (headless Chromium,
QA218 F2): a tool named with a real tab (shown `tab\\there`, its `\\t` a purple
`tspan.esc`) is told apart from one named with a backslash and a `t` (`tab\\there`
unmarked), in the left labels and the right-hand numbers labels, cut ("…") or whole; the
bars' tooltips (plain text, never marked) are the same escaped text, a newline a name holds
`\\n` on its line, not a line break; and no bidi or control character is written raw."""
from __future__ import annotations

import pytest

from agents_trace.records import StepResult, ToolCall
from agents_trace.text_table import printable
from tests.agents_trace.browser import chromium_fixture, connect, page_fixture, wait_for  # noqa: F401 (fixtures)
from tests.agents_trace.helpers import ManualClock, make_tracer, served_viewer, tool_call_message
from tests.agents_trace.test_viewer_page import KEYS

LONG = "\t" + "very_long_tool_name_" * 8   # a marked escape in a label cut with "…"
# each step asks for the next tool, then runs after it; the last answers
TOOLS = ("tab\there", "tab\\there", "invoice_\u202etxt.exe", "invoice_\\u202etxt.exe", "two\nlines", LONG)
# each row's labels' marks, their texts outside any <title>, their tooltips; the bars' tooltips
GANTT = """
const read = (t) => ({ marks: [...t.querySelectorAll('tspan.esc')].map((e) => e.textContent),
  text: [...t.childNodes].filter((n) => n.nodeName !== 'title').map((n) => n.textContent).join(''),
  title: t.querySelector('title') ? t.querySelector('title').textContent : null });
return [...document.querySelectorAll('#gantt-svg .gantt-row')].map((row) => ({
  left: read(row.querySelector('text.gantt-label')), right: read(row.querySelector('text.gantt-numbers')),
  tips: [...row.querySelectorAll('rect > title')].map((t) => t.textContent) }));"""


def marks(name: str) -> list[str]:
    """The escapes `name` shows marked, in order."""
    return [printable(ch) for ch in name if not ch.isprintable()]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path_factory.mktemp("timeline-escapes"), clock)
    headers, messages = {"x-session-id": "names"}, [{"role": "user", "content": "go"}]
    for i, name in enumerate((*TOOLS, None)):
        ctx = tracer.begin("acme", headers, {"model": "tiny", "messages": list(messages)})
        clock.advance(0.5)
        if name is None:
            tracer.end(ctx, StepResult(num_input_tokens=9, num_output_tokens=2, ttft_s=0.1, worker="w0",
                                       finish_reason="stop", output_text="done"))
            break
        tracer.end(ctx, StepResult(num_input_tokens=9, num_output_tokens=2, ttft_s=0.1, worker="w0",
                                   finish_reason="tool_calls", tool_calls=(ToolCall(f"c{i}", name, "{}"),)))
        clock.advance(1.0)
        messages += [tool_call_message(f"c{i}", name), {"role": "tool", "tool_call_id": f"c{i}", "content": "ok"}]
    assert tracer.flush(5.0)
    with served_viewer(tracer, KEYS) as base_url:
        yield base_url


@pytest.fixture
def rows(served, driver):
    connect(driver, served, "k-acme")
    driver.get(f"{served}/ui#/session/acme/names")
    return wait_for(driver, lambda d: len(d.find_elements("css selector", "#gantt-svg .gantt-row")) == len(TOOLS) + 1
                    and d.execute_script(GANTT))


def test_the_timeline_labels_mark_each_escape_and_not_the_text_a_name_holds(rows, driver):
    afters = (None, *TOOLS)
    asked = (*TOOLS, None)
    for row, after, ask in zip(rows, afters, asked):
        assert row["left"]["marks"] == (marks(after) if after else []), row
        assert row["right"]["marks"] == (marks(after) if after else []) + (marks(ask) if ask else []), row
    # the same text on screen, told apart by its marks
    assert rows[1]["left"]["text"].endswith("tab\\there") and rows[2]["left"]["text"].endswith("tab\\there")
    assert rows[3]["left"]["text"].endswith("invoice_\\u202etxt.exe")
    assert rows[4]["left"]["text"].endswith("invoice_\\u202etxt.exe")
    # a label cut with "…" keeps its mark, its tooltip the whole text, escaped
    cut = rows[6]["left"]
    assert cut["text"].endswith("…") and cut["marks"] == ["\\t"]
    assert cut["title"].endswith(printable(LONG)) and cut["title"].startswith(cut["text"][:-1])
    purple = driver.execute_script("return getComputedStyle(document.querySelector('#gantt-svg tspan.esc')).fill")
    assert purple == "rgb(123, 31, 162)"   # app.css: the steps table's `.esc` colour


def test_the_timeline_tooltips_are_the_escaped_text_and_nothing_is_written_raw(rows, driver):
    # row 5 ran after "two\nlines", and row 4 asked for it: `\n` on its line, not a line break
    assert rows[5]["tips"][0].split("\n")[0] == "tool run: two\\nlines"
    assert "\nasked for: two\\nlines\n" in rows[4]["tips"][-1] + "\n"
    assert rows[1]["tips"][0].split("\n")[0] == "tool run: tab\\there"
    text = driver.execute_script("return document.getElementById('gantt').textContent")
    assert all(ch.isprintable() or ch == "\n" for ch in text), [ch for ch in text if not ch.isprintable()]


def test_a_cut_keeps_each_piece_marked_even_an_escape_cut_short(rows, driver):
    """charts.js `fitParts` over dom.js `visibleParts`, one character one px wide."""
    got = driver.execute_script("""const width = (t) => Array.from(t).length;
      return [5, 8, 2].map((w) => fitParts(visibleParts('a\\u202eb'), w, width));""")
    assert got == [[{"text": "a", "esc": False}, {"text": "\\u2", "esc": True}, {"text": "…", "esc": False}],
                   [{"text": "a", "esc": False}, {"text": "\\u202e", "esc": True}, {"text": "b", "esc": False}],
                   [{"text": "a", "esc": False}, {"text": "…", "esc": False}]]
