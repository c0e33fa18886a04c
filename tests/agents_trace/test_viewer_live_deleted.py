"""/ui's Live on a session page whose session is deleted (headless Chromium, QA218 F3).

Live's 404 for the session shows what a session that cannot be opened shows, "Session not
found", and none of the deleted session's data (its title, summary, timeline, charts and
steps were left drawn, and a 404 asked for every tick); Live then asks for it only every
app.js LIVE_GONE_INTERVAL_MS (browser.LIVE_FIGURES_TICK_MS here), so an agent that goes on
under its id shows again. A transient error (a 503, the network) leaves the page as it was."""
from __future__ import annotations

import time

import httpx
import pytest
from fastapi.responses import JSONResponse

from agents_trace.records import StepResult
from tests.agents_trace.browser import (LIVE_FIGURES_TICK_MS, LIVE_TICK_MS, chromium_fixture,  # noqa: F401
                                        connect, page_fixture, wait_for)
from tests.agents_trace.helpers import ManualClock, make_tracer, viewer_app
from tests.agents_trace.test_viewer_page import KEYS
from tests.gateway.serving import start_server

SESSION = "doomed"
NOT_FOUND = "Session not found (or not visible to this key)."
LIVE_WAIT_S = 8
BUSY = "the gateway is busy"
# the page's requests for the session so far (its Live refreshes among them)
ASKED = f"""return performance.getEntriesByType('resource')
  .filter((e) => new URL(e.name).pathname === '/v1/traces/sessions/{SESSION}').length;"""
# `window.offline`: while true, the page's fetches fail as a network error's would
OFFLINE = """
const send = window.fetch.bind(window);
window.offline = false;
window.fetch = (input, init) => window.offline ? Promise.reject(new TypeError("Failed to fetch")) : send(input, init);
"""


@pytest.fixture
def live(tmp_path, driver):
    """(the driver on session SESSION's page, its two steps shown and Live on; `step()`: one
    more step of the session, flushed; `failing`: set its "on" and the session's API answers
    503) over a viewer served for this test."""
    from selenium.webdriver.common.by import By

    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)

    def step() -> None:
        ctx = tracer.begin("acme", {"x-session-id": SESSION},
                           {"model": "tiny", "messages": [{"role": "user", "content": "go on"}]})
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=9, num_output_tokens=2, ttft_s=0.1, worker="w0",
                                   finish_reason="stop", output_text="ok"))
        clock.advance(1.0)
        assert tracer.flush(5.0)

    failing = {"on": False}
    app = viewer_app(tracer, KEYS)

    @app.middleware("http")
    async def flaky(request, call_next):
        if failing["on"] and request.url.path.startswith("/v1/traces/sessions/"):
            return JSONResponse({"error": {"message": BUSY}}, status_code=503)
        return await call_next(request)

    step(), step()
    server = start_server(app)
    try:
        connect(driver, server.base_url, "k-acme")
        driver.get(f"{server.base_url}/ui#/session/acme/{SESSION}")
        wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 2)
        driver.find_element(By.ID, "live").click()
        yield driver, server.base_url, step, failing
    finally:
        server.stop()
        tracer.stop()


def status(driver) -> str:
    return driver.find_element("id", "status").text


def test_live_shows_session_not_found_once_its_session_is_deleted_and_finds_it_again(live):
    from selenium.webdriver.common.by import By

    driver, base_url, step, _ = live
    assert httpx.delete(f"{base_url}/v1/traces/sessions/{SESSION}",
                        headers={"authorization": "Bearer k-acme"}).status_code == 200
    wait_for(driver, lambda d: status(d) == NOT_FOUND, timeout_s=LIVE_WAIT_S)
    assert not driver.find_element(By.ID, "session-view").is_displayed()
    left = driver.execute_script("""return ['session-title', 'session-summary', 'gantt', 'context-chart', 'steps']
      .map((id) => document.getElementById(id).querySelectorAll('tbody tr, svg').length +
                   (id === 'steps' ? 0 : document.getElementById(id).textContent.length));""")
    assert left == [0] * 5, left   # nothing of the deleted session left on the page, even hidden
    # Live asks again at its slow pace only: a tick (LIVE_TICK_MS) asked 10 times in 2.5 s
    asked = driver.execute_script(ASKED)
    time.sleep(10 * LIVE_TICK_MS / 1000)
    assert driver.execute_script(ASKED) - asked <= 10 * LIVE_TICK_MS // LIVE_FIGURES_TICK_MS + 1
    assert status(driver) == NOT_FOUND
    step()   # the agent goes on under its id: the session shows again, Live still on
    wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 1,
             timeout_s=LIVE_WAIT_S)
    assert driver.find_element(By.ID, "session-view").is_displayed()
    assert driver.find_element(By.ID, "live").is_selected()
    assert status(driver) == ""
    assert "1 step" in driver.find_element(By.ID, "session-summary").text
    step()   # and at Live's usual pace again
    wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 2,
             timeout_s=LIVE_WAIT_S)


def test_a_transient_error_leaves_the_live_page_as_it_was(live):
    """Only a 404 says the session is gone: a 503 or a network error shows in the status
    line, the session's data stays, and the next refresh that succeeds clears it."""
    from selenium.webdriver.common.by import By

    driver, _, step, failing = live
    driver.execute_script(OFFLINE)

    def intact(d) -> bool:
        return (d.find_element(By.ID, "session-view").is_displayed()
                and len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 2
                and len(d.find_elements(By.CSS_SELECTOR, "#gantt-svg .gantt-row")) == 2
                and d.find_element(By.ID, "session-title").text == f"Session {SESSION}")

    failing["on"] = True
    wait_for(driver, lambda d: status(d) == BUSY, timeout_s=LIVE_WAIT_S)
    assert intact(driver)
    failing["on"] = False
    driver.execute_script("window.offline = true")
    wait_for(driver, lambda d: status(d) == "Failed to fetch", timeout_s=LIVE_WAIT_S)
    assert intact(driver)
    driver.execute_script("window.offline = false")
    wait_for(driver, lambda d: status(d) == "", timeout_s=LIVE_WAIT_S)
    assert intact(driver)
    step()   # Live at its usual pace still
    wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 3,
             timeout_s=LIVE_WAIT_S)
