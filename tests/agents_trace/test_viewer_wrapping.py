"""Names and times stay whole in /ui's tables where they fit (headless Chromium, QA155 #2):
a text cell that may break anywhere shrinks to one character in the table's layout, so at
1280 px the steps table showed "get_weath|er ✓" in Predicted next and Actual, and at 800
px the list showed a date as "12/6/2|026,". Ids without a place to break still wrap
anywhere (test_viewer_addresses). At a phone's width the sessions list scrolls in its own
box, as the session's tables do, not the page (QA205 F4)."""
from __future__ import annotations

import pytest

from cache.forecast import Forecast
from tests.agents_trace.browser import chromium_fixture, connect, page_fixture, wait_for  # noqa: F401 (fixtures)
from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session, viewer_app
from tests.agents_trace.test_viewer_page import KEYS
from tests.gateway.serving import start_server

# The words of a cell's text that its lines split (the tops of a word's line boxes differ),
# and how many lines the cell's text takes.
BROKEN_WORDS = """
const brokenWords = (cell) => {
  const text = cell.firstChild, broken = [];
  for (const m of text.data.matchAll(/\\S+/g)) {
    const range = document.createRange();
    range.setStart(text, m.index); range.setEnd(text, m.index + m[0].length);
    if (new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size > 1) broken.push(m[0]);
  }
  return broken;
};
const lines = (cell) => {
  const range = document.createRange();
  range.selectNodeContents(cell);
  return new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
};
const column = (table, name) => [...document.querySelectorAll(`#${table} thead th`)].findIndex(
  (h) => h.textContent === name);
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The scripted agent run (get_weather, book_table, answer) under a cold forecast that
    says get_weather, and a step refused with a long message (a wide Error column)."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path_factory.mktemp("wrapping"), clock)
    tracer.set_forecaster(lambda tenant, session, now_s: Forecast(
        tenant, session, now_s, next_step={"get_weather": 0.95, "END": 0.05}, p_end=0.05, confident=False))
    run_scripted_session(tracer, clock, headers={"x-session-id": "run", "x-agent-name": "travel"})
    from agents_trace.records import StepResult
    ctx = tracer.begin("acme", {"x-session-id": "run"}, {"model": "tiny", "messages": [{"role": "user", "content": "x"}]})
    clock.advance(0.1)
    tracer.end(ctx, StepResult(error="context_length_exceeded", error_message="This model's maximum context length "
                               "is 8192 tokens. However, you requested 9000 tokens (9000 in the messages). Please "
                               "reduce the length of the messages."))
    assert tracer.flush(5.0)
    server = start_server(viewer_app(tracer, KEYS))
    yield server.base_url
    server.stop()
    tracer.stop()


def test_tool_names_in_predicted_next_and_actual_stay_whole_at_1280_px(served, driver):
    base_url = served
    driver.set_window_size(1280, 900)
    connect(driver, base_url, "k-acme")
    driver.get(f"{base_url}/ui#/session/acme/run")
    wait_for(driver, lambda d: len(d.find_elements("css selector", "#steps tr.step-row")) == 4)
    cells = driver.execute_script(BROKEN_WORDS + """
        const rows = [...document.querySelectorAll('#steps tr.step-row')];
        return ['Predicted next', 'Actual'].flatMap((name) => rows.map((r) => r.cells[column('steps', name)]))
          .filter((c) => c.firstChild).map((c) => [c.textContent, brokenWords(c), lines(c)]);""")
    assert [broken for _, broken, _ in cells if broken] == [], cells
    assert ["get_weather\u00a0✓", [], 1] in cells, cells   # the forecast right: one line


def test_a_time_in_the_sessions_list_stays_whole_at_800_px(served, driver):
    base_url = served
    driver.set_window_size(800, 900)
    connect(driver, base_url, "k-acme")
    wait_for(driver, lambda d: len(d.find_elements("css selector", "#sessions tbody tr")) == 1)
    text, broken = driver.execute_script(BROKEN_WORDS + """
        const cell = document.querySelector('#sessions tbody tr').cells[column('sessions', 'Last active')];
        return [cell.textContent, brokenWords(cell)];""")
    assert broken == [], text


def test_the_sessions_list_scrolls_in_its_own_box_not_the_page_at_a_phones_width(served, driver):
    base_url = served
    driver.set_window_size(390, 844)   # Chromium's narrowest window: an inner width of about 500 px
    connect(driver, base_url, "k-acme")
    wait_for(driver, lambda d: len(d.find_elements("css selector", "#sessions tbody tr")) == 1)
    page, inner, table, box, box_shown, overflow = driver.execute_script("""
        const table = document.getElementById('sessions'), box = table.parentElement;
        return [document.documentElement.scrollWidth, innerWidth, table.offsetWidth, box.scrollWidth,
                box.clientWidth, getComputedStyle(box).overflowX];""")
    assert table > inner, (table, inner)   # too wide for the window: it has to scroll somewhere
    assert page <= inner, (page, inner)    # not the page (the header, filters and figures stay put)
    assert overflow == "auto" and box >= table > box_shown, (overflow, box, table, box_shown)
