"""A live session page as steps arrive (headless Chromium): messages shown stay shown
without being fetched again, the keyboard's focus stays on its control, and the controls
and charts say what they are to a screen reader."""
from __future__ import annotations

import re

import pytest
from fastapi import Request

from tests.agents_trace.browser import chromium_fixture, connect, page_fixture, wait_for  # noqa: F401 (fixtures)
from tests.agents_trace.helpers import ManualClock, make_tracer, viewer_app
from tests.agents_trace.test_viewer_page import KEYS
from tests.gateway.serving import start_server


@pytest.fixture
def live_session(tmp_path):
    """A live session `live` of acme with one step (content captured), `add_step()` to store
    the agent's next one, and the server's base URL with `content_asks`, the paths of every
    step-content request the page made."""
    from agents_trace.records import StepResult

    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    messages = [{"role": "user", "content": "first question " + "x" * 2000}]

    def add_step() -> None:
        index = len(messages) // 2
        request_id = f"chatcmpl-live-{index}"
        ctx = tracer.begin("acme", {"x-session-id": "live"}, {"model": "tiny", "messages": list(messages)},
                           request_id=request_id)
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=20 * len(messages), num_output_tokens=2, ttft_s=0.1,
                                   worker="w0", finish_reason="stop", output_text=f"answer {index}",
                                   response_id=request_id))
        messages.extend([{"role": "assistant", "content": f"answer {index}"}, {"role": "user", "content": "and?"}])
        clock.advance(2.0)
        assert tracer.flush(5.0)

    add_step()
    app = viewer_app(tracer, KEYS)
    content_asks: list[str] = []

    @app.middleware("http")
    async def count_content(request: Request, call_next):
        if request.url.path.endswith("/content"):
            content_asks.append(request.url.path)
        return await call_next(request)

    server = start_server(app)
    try:
        yield server.base_url, add_step, content_asks
    finally:
        server.stop()
        tracer.stop()


def _rows(driver) -> int:
    from selenium.webdriver.common.by import By
    return len(driver.find_elements(By.CSS_SELECTOR, "#steps tr.step-row"))


def _still_shown(node) -> bool:
    """`node` is still on the page and shown (not replaced by a new one)."""
    from selenium.common.exceptions import StaleElementReferenceException
    try:
        return node.is_displayed()
    except StaleElementReferenceException:
        return False


def _open_live(driver, base_url: str) -> None:
    from selenium.webdriver.common.by import By
    connect(driver, base_url, "k-acme")
    driver.get(f"{base_url}/ui#/session/acme/live")
    wait_for(driver, lambda d: _rows(d) == 1)
    driver.find_element(By.ID, "live").click()


def test_live_steps_keep_open_messages_without_fetching_them_again(live_session, driver):
    from selenium.webdriver.common.by import By
    base_url, add_step, content_asks = live_session
    _open_live(driver, base_url)
    driver.find_element(By.CSS_SELECTOR, "button.show-content").click()
    shown = wait_for(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#steps pre.content"))
    assert "first question" in shown.text
    for rows in (2, 3):
        add_step()   # the agent's next step: the table is drawn again with it
        wait_for(driver, lambda d, rows=rows: _rows(d) == rows)
        # the same messages, on screen all along: not fetched again, never back to "loading…"
        assert _still_shown(shown) and "first question" in shown.text
        assert "loading…" not in driver.find_element(By.ID, "steps").text
    assert content_asks == ["/v1/traces/sessions/live/steps/0/content"]
    # hidden, it is forgotten (only open steps' messages are kept): shown again, fetched again
    driver.find_element(By.CSS_SELECTOR, "tr[data-step='0'] button.show-content").click()
    driver.find_element(By.CSS_SELECTOR, "tr[data-step='0'] button.show-content").click()
    wait_for(driver, lambda d: "first question" in d.find_element(By.CSS_SELECTOR, "#steps pre.content").text)
    assert len(content_asks) == 2


def test_live_steps_keep_the_keyboard_focus_on_its_control(live_session, driver):
    from selenium.webdriver.common.by import By
    base_url, add_step, _ = live_session
    focused = ("const f = document.activeElement, row = f.closest('tr.step-row');"
               "return [f.tagName, f.matches('button.show-content') ? 'show' : f.matches('td.step-id') ? 'request' : '',"
               "        row ? row.dataset.step : '', f.textContent]")
    _open_live(driver, base_url)
    driver.execute_script("document.querySelector(\"tr[data-step='0'] button.show-content\").focus()")
    assert driver.execute_script(focused) == ["BUTTON", "show", "0", "show"]
    add_step()
    wait_for(driver, lambda d: _rows(d) == 2)
    assert driver.execute_script(focused) == ["BUTTON", "show", "0", "show"]   # not <body>
    driver.switch_to.active_element.click()   # Enter or a click: its messages open, and it says so
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#steps pre.content"))
    add_step()
    wait_for(driver, lambda d: _rows(d) == 3)
    assert driver.execute_script(focused) == ["BUTTON", "show", "0", "hide"]
    # the request id cell: reachable by the keyboard, its id readable there
    driver.execute_script("document.querySelector(\"tr[data-step='1'] td.step-id\").focus()")
    add_step()
    wait_for(driver, lambda d: _rows(d) == 4)
    assert driver.execute_script(focused)[:3] == ["TD", "request", "1"]
    shown = driver.execute_script("return getComputedStyle(document.activeElement, '::after').content")
    assert shown == '"request chatcmpl-live-1"'   # shown beside the focused cell (app.css)


def test_show_buttons_and_charts_say_what_they_are(live_session, driver):
    from selenium.webdriver.common.by import By
    base_url, add_step, _ = live_session
    add_step()
    connect(driver, base_url, "k-acme")
    driver.get(f"{base_url}/ui#/session/acme/live")
    wait_for(driver, lambda d: _rows(d) == 2)
    buttons = driver.find_elements(By.CSS_SELECTOR, "button.show-content")
    assert [b.accessible_name for b in buttons] == ["show messages of step 0", "show messages of step 1"]
    assert [b.get_attribute("aria-expanded") for b in buttons] == ["false", "false"]
    buttons[1].click()
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#steps pre.content"))
    assert (buttons[1].text, buttons[1].accessible_name, buttons[1].get_attribute("aria-expanded")) == (
        "hide", "hide messages of step 1", "true")
    cell = driver.find_element(By.CSS_SELECTOR, "tr[data-step='1'] td.step-id")
    assert cell.get_attribute("tabindex") == "0" and "chatcmpl-live-1" in cell.accessible_name
    for chart in ("gantt-svg", "context-svg"):
        svg = driver.find_element(By.ID, chart)
        assert svg.get_attribute("role") == "img"
        assert re.search(r"steps #0 to #1\b", svg.get_attribute("aria-label"))
    assert driver.find_element(By.TAG_NAME, "h1").text == "stepahead · agent traces"
