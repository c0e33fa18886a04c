"""What /ui's labels and lines say, in headless Chromium: the timeline's labels fit beside
its bars whatever the tool names (cut with "…", whole in a tooltip, the numbers always
whole), a cache-hit percent is the CLI's, a session says why it ended, a damaged link
says what is wrong with it, and "From prev" says what it counts."""
from __future__ import annotations

import pytest

from agents_trace.api import Viewer
from agents_trace.records import StepResult, ToolCall
from agents_trace.traces_view import _share

from tests.agents_trace.browser import chromium_fixture, connect, page_fixture, wait_for  # noqa: F401 (fixtures)
from tests.agents_trace.helpers import ManualClock, idle_out, make_tracer, served_viewer

KEYS = {"k-acme": Viewer("acme")}
EMAIL_TOOLS = ("search_customer_records_by_email_0", "search_customer_records_by_email_1")
LONG_TOOLS = tuple("very_long_tool_name_" * 8 + str(i) for i in range(3))   # 161 characters each


def _tool_session(tracer, clock, session: str, tools: tuple[str, ...], tool_s: float) -> None:
    """A step asking for `tools`, then one after their results (`tool_s` later) with 16 of
    its 128 prompt tokens cached."""
    headers = {"x-session-id": session}
    messages = [{"role": "user", "content": "find the customer"}]
    ctx = tracer.begin("acme", headers, {"model": "tiny", "messages": list(messages)})
    clock.advance(0.5)
    calls = tuple(ToolCall(f"c{i}", name, "{}") for i, name in enumerate(tools))
    tracer.end(ctx, StepResult(num_input_tokens=40, num_output_tokens=9, ttft_s=0.1, worker="w0",
                               finish_reason="tool_calls", tool_calls=calls))
    clock.advance(tool_s)
    messages += [{"role": "assistant", "content": None, "tool_calls": [
        {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": "{}"}} for c in calls]}]
    messages += [{"role": "tool", "tool_call_id": c.call_id, "content": "ok"} for c in calls]
    ctx = tracer.begin("acme", headers, {"model": "tiny", "messages": list(messages)})
    clock.advance(0.5)
    tracer.end(ctx, StepResult(num_input_tokens=128, num_cached_tokens=16, num_output_tokens=3, ttft_s=0.1,
                               worker="w0", finish_reason="stop", output_text="found"))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """"emails" and "long-names" (ended idle, their tools ran 1.0 and 2.0 s), then "fresh" (open)."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path_factory.mktemp("labels"), clock, sweep_interval_s=0.02,
                            session_idle_timeout_s=60.0)
    _tool_session(tracer, clock, "emails", EMAIL_TOOLS, 1.0)
    _tool_session(tracer, clock, "long-names", LONG_TOOLS, 2.0)
    idle_out(tracer, clock, 61.0)
    _tool_session(tracer, clock, "fresh", ("ls",), 1.0)
    assert tracer.flush(5.0)
    with served_viewer(tracer, KEYS) as base_url:
        yield base_url


# Each timeline row's labels and bars, read at once: the left and right label's box, text
# and tooltip, the bars' extent, the plot's start (its first tick line) and the chart's width.
GANTT_GEOMETRY = """
const root = document.getElementById('gantt-svg');
const plotStart = Number(root.querySelector('line').getAttribute('x1'));
return [...root.querySelectorAll('.gantt-row')].map((row) => {
  const texts = row.querySelectorAll(':scope > text');
  const label = (t) => { const b = t.getBBox(); const tip = t.querySelector('title');
    return { left: b.x, right: b.x + b.width, text: t.firstChild.nodeValue, title: tip ? tip.textContent : null }; };
  const bars = [...row.querySelectorAll('rect')].map((r) => r.getBBox());
  return { plotStart, width: root.width.baseVal.value, first: label(texts[0]), last: label(texts[texts.length - 1]),
           barsLeft: Math.min(...bars.map((b) => b.x)), barsRight: Math.max(...bars.map((b) => b.x + b.width)) };
});"""


@pytest.mark.parametrize("session, tools, gap", [("emails", EMAIL_TOOLS, "1.000"), ("long-names", LONG_TOOLS, "2.000")])
def test_timeline_labels_fit_beside_the_bars_and_keep_their_numbers(served, tmp_path, session, tools, gap, driver):
    base_url = served
    connect(driver, base_url, "k-acme")
    driver.get(f"{base_url}/ui#/session/acme/{session}")
    rows = wait_for(driver, lambda d: d.find_elements("css selector", "#gantt-svg .gantt-row") and
                    d.execute_script(GANTT_GEOMETRY))
    driver.save_screenshot(str(tmp_path / f"gantt-{session}.png"))
    assert len(rows) == 2
    for row in rows:
        assert row["first"]["right"] <= min(row["plotStart"], row["barsLeft"]), row   # not under the bars
        assert row["last"]["left"] >= row["barsRight"] and row["last"]["right"] <= row["width"], row   # not cut off
    after_tools = rows[1]
    assert f"{gap} s → chat 16/128 tok cached → text answer" in after_tools["last"]["text"]
    for label in (after_tools["first"], after_tools["last"]):   # shortened, whole in its tooltip
        whole = label["title"] or label["text"]
        assert all(name in whole for name in tools), label
        assert label["title"] is None or label["text"].endswith("…") or "… " in label["text"], label


def test_a_cache_hit_percent_and_a_session_state_read_as_the_cli_writes_them(served, driver):
    from selenium.webdriver.common.by import By
    base_url = served
    pairs = [(a, b) for b in (1, 3, 7, 8, 128, 200, 1000, 4096) for a in range(0, b + 1, max(1, b // 64))]
    connect(driver, base_url, "k-acme")
    wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")) == 3)
    assert driver.execute_script("return arguments[0].map(([a, b]) => pct(a, b))", pairs) == \
        [_share(a, b) for a, b in pairs]
    states = driver.execute_script(
        "const at = [...document.querySelectorAll('#sessions thead th')].findIndex(h => h.textContent === 'State');"
        "return [...document.querySelectorAll('#sessions tbody tr')].map(r => [r.cells[0].textContent,"
        " r.cells[at].textContent])")
    assert states == [["fresh", "open"], ["long-names", "ended (idle)"], ["emails", "ended (idle)"]]
    driver.find_element(By.LINK_TEXT, "emails").click()
    wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 2)
    assert driver.find_element(By.ID, "session-summary").text.endswith("· ended (idle)")
    hit = driver.execute_script(
        "const at = [...document.querySelectorAll('#steps thead th')].findIndex(h => h.textContent === 'Hit');"
        "return document.querySelectorAll('#steps tr.step-row')[1].cells[at].textContent")
    assert hit == _share(16, 128) == "13%"


def test_a_link_whose_session_part_is_damaged_says_so(served, driver):
    from selenium.webdriver.common.by import By
    base_url = served
    connect(driver, base_url, "k-acme")
    driver.get(f"{base_url}/ui#/session/acme/%E0%A4%A")
    status = wait_for(driver, lambda d: d.find_element(By.ID, "status").text)
    assert "URI malformed" not in status
    assert status.startswith("Error: This link's session address is damaged") and "%E0%A4%A" in status
    assert not driver.find_element(By.ID, "session-view").is_displayed()


def test_from_prevs_tooltip_says_it_counts_whole_record_blocks_so_cached_may_be_larger(served, driver):
    """QA205 F2: From prev is measured on the prompt fingerprints' blocks, Cached on the
    engine's smaller ones; the header must not say From prev is all the cache could keep."""
    from agents_trace.prompt_blocks import RECORD_BLOCK_SIZE
    connect(driver, served, "k-acme")
    title = driver.execute_script("return [...document.querySelectorAll('#steps thead th')]"
                                  ".find((h) => h.textContent === 'From prev').title")
    assert f"whole {RECORD_BLOCK_SIZE}-token blocks" in title and "Cached" in title and "may be larger" in title
    assert "could have kept" not in title
