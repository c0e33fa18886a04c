"""/ui's steps table fits the window when tool names are long (headless Chromium, QA194
F2): ten parallel calls of 38-character names, and a 300-character name in the history
(only `tools[]` names are checked, so a client may send one), made the table about 1,650
and 3,490 px wide at 1,400 px, the Content column's "show" off-screen. A long name is
cut with "…" in its cell, the whole name in the cell's tooltip."""
from __future__ import annotations

import pytest

from cache.forecast import Forecast
from tests.agents_trace.browser import chromium_fixture, connect, page_fixture, wait_for  # noqa: F401 (fixtures)
from tests.agents_trace.helpers import ManualClock, make_tracer, tool_call_message, viewer_app
from tests.agents_trace.test_viewer_page import KEYS
from tests.gateway.serving import start_server

PARALLEL = [f"search_customer_database_by_region_{n:02d}" for n in range(10)]
LONG = "x" * 150 + "_" + "y" * 149   # 300 characters, one word


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Session "wide": a step asking for the ten PARALLEL calls, one after their results
    asking for LONG, one after LONG's result; forecasts say PARALLEL[0], so Actual shows
    the names asked for."""
    from agents_trace.records import StepResult, ToolCall
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path_factory.mktemp("wide"), clock, capture_content=True)
    tracer.set_forecaster(lambda tenant, session, now_s: Forecast(
        tenant, session, now_s, next_step={PARALLEL[0]: 0.9, "END": 0.1}, p_end=0.1, confident=True))
    headers = {"x-session-id": "wide"}
    messages = [{"role": "user", "content": "find them"}]
    for calls in ([(f"call_{n}", name) for n, name in enumerate(PARALLEL)], [("call_long", LONG)], []):
        ctx = tracer.begin("acme", headers, {"model": "tiny", "messages": list(messages)})
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=100, num_output_tokens=5, finish_reason="tool_calls" if calls
                                   else "stop", output_text="" if calls else "done",
                                   tool_calls=tuple(ToolCall(i, name, "{}") for i, name in calls)))
        clock.advance(1.0)
        for call_id, name in calls:
            messages += [tool_call_message(call_id, name), {"role": "tool", "tool_call_id": call_id, "content": "ok"}]
    assert tracer.flush(5.0)
    server = start_server(viewer_app(tracer, KEYS))
    yield server.base_url
    server.stop()
    tracer.stop()


LAYOUT = """
const table = document.getElementById('steps'), box = table.parentElement;
const hidden = box.scrollWidth - box.clientWidth;   // how much of the table the box hides
box.scrollLeft = box.scrollWidth;   // as far right as the user can scroll the table
const buttons = [...table.querySelectorAll('button.show-content')];
return {hidden, page: document.documentElement.scrollWidth, window: window.innerWidth,
        table: Math.round(table.getBoundingClientRect().right), box: Math.round(box.getBoundingClientRect().right),
        buttons: buttons.map((b) => Math.round(b.getBoundingClientRect().right)),
        titles: [...table.querySelectorAll('tbody td [title], tbody td[title]')].map((n) => n.getAttribute('title'))};
"""


def _open(driver, base_url: str, width: int) -> dict:
    driver.set_window_size(width, 900)
    connect(driver, base_url, "k-acme")
    driver.get(f"{base_url}/ui#/session/acme/wide")
    wait_for(driver, lambda d: len(d.find_elements("css selector", "#steps tr.step-row")) == 3)
    return driver.execute_script(LAYOUT)


def test_long_tool_names_keep_the_steps_table_and_its_show_buttons_in_a_1400_px_window(served, driver):
    layout = _open(driver, served, 1400)
    assert layout["page"] <= layout["window"], layout            # no sideways scrolling
    assert layout["hidden"] == 0 and layout["box"] <= layout["window"], layout   # the whole table, none of it scrolled
    assert len(layout["buttons"]) == 3 and max(layout["buttons"]) <= layout["window"], layout


def test_at_1000_px_the_steps_table_scrolls_in_its_box_and_its_show_buttons_are_reachable(served, driver):
    layout = _open(driver, served, 1000)
    assert layout["page"] <= layout["window"], layout            # the page itself does not scroll sideways
    assert layout["box"] <= layout["window"], layout
    assert len(layout["buttons"]) == 3 and max(layout["buttons"]) <= layout["box"], layout


def test_a_cut_name_has_the_whole_name_in_its_tooltip(served, driver):
    layout = _open(driver, served, 1400)
    assert LONG in layout["titles"], layout["titles"]
    text = driver.find_element("id", "steps").text
    assert LONG not in text and LONG[:47] + "…" in text   # cut on screen, in Asked for, After and Actual

