"""Live on a slow gateway (headless Chromium, FI76): a refresh that takes longer than the
Live interval does not overlap the next one (app.js `setLive`: a tick while the last
refresh is in flight is skipped). Here every /v1/ reply comes SLOW_TICKS ticks late
(`SLOW_API`, a fetch wrapper added by DevTools like browser.py's timer wrapper): a session's
new steps each show once, in order, never taken back, and the page never has more /v1/
requests in flight than one refresh needs (a session: one; the list: one page at a time)."""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from agents_trace.records import StepResult
from tests.agents_trace.browser import LIVE_TICK_MS, chromium_fixture, connect, page_fixture, wait_for  # noqa: F401
from tests.agents_trace.helpers import ManualClock, make_tracer, served_viewer
from tests.agents_trace.test_viewer_page import KEYS

SLOW_TICKS = 3
LIVE_WAIT_S = 10
# `window.slowApi`: `delayMs` (0 until a test slows the API down) added to every /v1/
# reply; `now`/`most`: the /v1/ requests in flight, and the most at once since reset;
# `mostByPath`: the same per path; `asked`: the /v1/ requests sent.
SLOW_API = """
(() => {
  const send = window.fetch.bind(window);
  const api = window.slowApi = { delayMs: 0, now: 0, most: 0, nowByPath: {}, mostByPath: {}, asked: 0 };
  window.fetch = async (input, init) => {
    const path = new URL(typeof input === "string" ? input : input.url, location.href).pathname;
    if (!path.startsWith("/v1/")) return send(input, init);
    api.asked += 1;
    api.now += 1;
    api.most = Math.max(api.most, api.now);
    api.nowByPath[path] = (api.nowByPath[path] || 0) + 1;
    api.mostByPath[path] = Math.max(api.mostByPath[path] || 0, api.nowByPath[path]);
    try {
      const response = await send(input, init);   // the store as it was when asked
      if (api.delayMs) await new Promise((done) => setTimeout(done, api.delayMs));
      return response;
    } finally {
      api.now -= 1;
      api.nowByPath[path] -= 1;
    }
  };
})();"""
# every distinct list of step numbers the steps table showed, in the order shown
RECORD_STEPS = """
const seen = window.stepsSeen = [];
const note = () => {
  const shown = [...document.querySelectorAll('#steps tr.step-row')].map((r) => r.dataset.step).join(",");
  if (seen[seen.length - 1] !== shown) seen.push(shown);
};
note();
new MutationObserver(note).observe(document.getElementById('steps'), { childList: true, subtree: true });
"""
SLOW_DOWN = f"Object.assign(window.slowApi, {{ delayMs: {SLOW_TICKS * LIVE_TICK_MS}, most: window.slowApi.now, " \
            "mostByPath: {}, asked: 0 })"


@pytest.fixture
def slow_driver(driver) -> Iterator[object]:
    """`driver` with `SLOW_API` in every page it opens (until the test ends)."""
    added = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": SLOW_API})
    try:
        yield driver
    finally:
        driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": added["identifier"]})


@pytest.fixture
def served(tmp_path) -> Iterator[tuple]:
    """(a function that stores the next step of session "slow" of tenant acme, the viewer's
    base URL), step #0 stored."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    made = []

    def store_step() -> None:
        made.append(len(made))
        ctx = tracer.begin("acme", {"x-session-id": "slow"},
                           {"model": "tiny", "messages": [{"role": "user", "content": f"call {len(made)}"}]})
        clock.advance(0.2)
        tracer.end(ctx, StepResult(num_input_tokens=7, num_output_tokens=1, ttft_s=0.05, worker="w0",
                                   finish_reason="stop", output_text="ok"))
        clock.advance(0.5)
        assert tracer.flush(5.0)

    store_step()
    with served_viewer(tracer, KEYS) as base_url:
        yield store_step, base_url


def test_a_slow_live_session_shows_each_new_step_once_in_order_one_refresh_at_a_time(served, slow_driver):
    """Replies 3 ticks late: the old page started a refresh every tick, each from the steps
    shown when it began, so several were in flight at once and their answers overlapped."""
    from selenium.webdriver.common.by import By

    driver = slow_driver
    store_step, base_url = served
    connect(driver, base_url, "k-acme")
    driver.get(f"{base_url}/ui#/session/acme/slow")
    wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 1)
    driver.execute_script(RECORD_STEPS)
    driver.execute_script(SLOW_DOWN)
    driver.find_element(By.ID, "live").click()
    for _ in range(3):   # new steps while refreshes are on their way
        time.sleep(2 * LIVE_TICK_MS / 1000)
        store_step()
    wait_for(driver, lambda d: "4 steps" in d.find_element(By.ID, "session-summary").text and
             d.execute_script("return window.stepsSeen[window.stepsSeen.length - 1]") == "0,1,2,3",
             timeout_s=LIVE_WAIT_S)
    time.sleep(SLOW_TICKS * LIVE_TICK_MS / 1000)   # a refresh still on its way lands
    seen = driver.execute_script("return window.stepsSeen")
    api = driver.execute_script("return window.slowApi")
    assert seen[-1] == "0,1,2,3", seen
    wanted = ["0", "0,1", "0,1,2", "0,1,2,3"]
    assert all(shown in wanted for shown in seen) and seen == sorted(seen, key=wanted.index), \
        f"steps shown twice, out of order or taken back: {seen}"
    assert api["asked"] >= 2, api   # Live went on asking
    assert api["most"] == 1, f"/v1/ requests in flight at once: {api}"


def test_a_slow_live_list_asks_one_page_at_a_time(served, slow_driver):
    """The list's Live on the same slow replies: the old page asked for its first page
    every tick, each request piling on the last ones."""
    from selenium.webdriver.common.by import By

    driver = slow_driver
    _, base_url = served
    connect(driver, base_url, "k-acme")
    wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")) == 1)
    driver.execute_script(SLOW_DOWN)
    driver.find_element(By.ID, "f-live").click()
    wait_for(driver, lambda d: d.execute_script("return window.slowApi.asked") >= 4, timeout_s=LIVE_WAIT_S)
    api = driver.execute_script("return window.slowApi")
    assert api["mostByPath"].get("/v1/traces/sessions") == 1, f"list pages in flight at once: {api}"
