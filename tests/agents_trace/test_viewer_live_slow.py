"""Live on a slow gateway (headless Chromium, FI76, FI79): a refresh that takes longer than
the Live interval does not overlap the next one, nor a "Load more sessions" (app.js
`setLive`, `inTurn`: a tick while the last refresh is in flight is skipped, a "load more"
waits for it), and a call the gateway never answers fails after app.js FETCH_TIMEOUT_MS
(`api`) instead of stopping Live. Here /v1/ replies come late (`SLOW_API`, a fetch wrapper
added by DevTools like browser.py's timer wrapper; every one SLOW_TICKS ticks late after
`SLOW_DOWN`): a session's new steps each show once, in order, never taken back, and the
page never has more /v1/ requests of a kind in flight than one refresh needs (a session:
one; the list: one page at a time, and one of each line over it)."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest

from agents_trace.records import StepResult
from tests.agents_trace.browser import LIVE_TICK_MS, chromium_fixture, connect, page_fixture, wait_for  # noqa: F401
from tests.agents_trace.helpers import ManualClock, listed_sessions, make_tracer, served_viewer
from tests.agents_trace.test_viewer_page import KEYS

SLOW_TICKS = 3
LIVE_WAIT_S = 10
# `window.slowApi`: `delayMs` (0 until a test slows the API down) added to every /v1/
# reply, `delayByPath` to those of a path instead; `hang`: how many of the next /v1/
# requests never answer (until the page aborts them); `now`/`most`: the /v1/ requests in
# flight, and the most at once since reset; `nowByPath`/`mostByPath`: the same per path;
# `asked`/`askedByPath`: the /v1/ requests sent. A delay ends early, failed, when the
# page aborts its request, as a real slow reply's would.
SLOW_API = """
(() => {
  const send = window.fetch.bind(window);
  const api = window.slowApi = { delayMs: 0, delayByPath: {}, hang: 0, now: 0, most: 0, nowByPath: {},
                                 mostByPath: {}, asked: 0, askedByPath: {} };
  const wait = (ms, signal) => new Promise((done, fail) => {
    const timer = ms === Infinity ? null : setTimeout(done, ms);
    if (signal) signal.addEventListener("abort", () => { clearTimeout(timer); fail(signal.reason); });
  });
  window.fetch = async (input, init) => {
    const path = new URL(typeof input === "string" ? input : input.url, location.href).pathname;
    if (!path.startsWith("/v1/")) return send(input, init);
    api.asked += 1;
    api.askedByPath[path] = (api.askedByPath[path] || 0) + 1;
    api.now += 1;
    api.most = Math.max(api.most, api.now);
    api.nowByPath[path] = (api.nowByPath[path] || 0) + 1;
    api.mostByPath[path] = Math.max(api.mostByPath[path] || 0, api.nowByPath[path]);
    const ms = api.hang > 0 ? (api.hang -= 1, Infinity) : api.delayByPath[path] ?? api.delayMs;
    try {
      const response = await send(input, init);   // the store as it was when asked
      if (ms) await wait(ms, init && init.signal);
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
            "mostByPath: {}, asked: 0, askedByPath: {} })"
IDLE = "return window.slowApi.now === 0"   # no /v1/ request in flight
# app.js FETCH_TIMEOUT_MS (30 s) as HUNG_AFTER_MS: a timer of 10 s or more fires then
HUNG_AFTER_MS = 4 * LIVE_TICK_MS
SHORT_TIMEOUTS = """
(() => {
  const after = window.setTimeout.bind(window);
  window.setTimeout = (callback, ms, ...args) => after(callback, ms >= 10000 ? %(hung)d : ms, ...args);
})();""" % {"hung": HUNG_AFTER_MS}


@contextlib.contextmanager
def in_every_page(driver, source: str) -> Iterator[object]:
    """`driver` with the script `source` run first in every page it opens, until the end."""
    added = driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": source})
    try:
        yield driver
    finally:
        driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": added["identifier"]})


@pytest.fixture
def slow_driver(driver) -> Iterator[object]:
    """`driver` with `SLOW_API` in every page it opens (until the test ends)."""
    with in_every_page(driver, SLOW_API):
        yield driver


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


def test_a_slow_live_list_asks_for_its_figures_once_at_a_time_too(served, slow_driver):
    """The window's figures and the forecasters' line 4 ticks late, the rows at once: one
    request of each in flight at most (an old refresh ended with its rows and every tick
    asked for those lines again while the last ones were still on their way; the figures
    now have a timer of their own that skips while they are)."""
    from selenium.webdriver.common.by import By

    driver = slow_driver
    _, base_url = served
    connect(driver, base_url, "k-acme")
    wait_for(driver, lambda d: len(listed_sessions(d)) == 1 and d.execute_script(IDLE))
    late = 4 * LIVE_TICK_MS
    driver.execute_script("Object.assign(window.slowApi, { delayByPath: arguments[0], mostByPath: {}, "
                          "askedByPath: {} })", {"/v1/traces/stats": late, "/v1/traces/forecasters": late})
    driver.find_element(By.ID, "f-live").click()
    wait_for(driver, lambda d: d.execute_script("return window.slowApi.askedByPath['/v1/traces/stats'] || 0") >= 2,
             timeout_s=LIVE_WAIT_S)
    api = driver.execute_script("return window.slowApi")
    assert api["mostByPath"].get("/v1/traces/stats") == 1, f"figures asked for again before they came: {api}"
    assert api["mostByPath"].get("/v1/traces/forecasters") == 1, api


MANY = 110   # sessions: "Load more sessions" twice after the first 50 lists them all


@pytest.fixture
def served_many(tmp_path) -> Iterator[tuple]:
    """(a function that stores a step of a session of tenant acme, the viewer's base URL),
    sessions m000..m109 stored, m109 the most recently active."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)

    def store_step(session: str) -> None:
        ctx = tracer.begin("acme", {"x-session-id": session},
                           {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
        clock.advance(0.1)
        tracer.end(ctx, StepResult(num_input_tokens=5, num_output_tokens=1, finish_reason="stop", output_text="ok"))
        clock.advance(1.0)

    for i in range(MANY):
        store_step(f"m{i:03d}")
    assert tracer.flush(5.0)

    def store_one(session: str) -> None:
        store_step(session)
        assert tracer.flush(5.0)
    with served_viewer(tracer, KEYS) as base_url:
        yield store_one, base_url


def test_load_more_waits_for_a_slow_live_refresh_and_two_clicks_load_two_pages(served_many, slow_driver):
    """"Load more sessions" clicked twice while a slow Live refresh is on its way: the old
    page sent both beside it, from the same cursor (the same page twice: 100 rows listed,
    the URL saying 150), each landing whenever it came."""
    from selenium.webdriver.common.by import By

    driver = slow_driver
    store_one, base_url = served_many
    connect(driver, base_url, "k-acme")
    wait_for(driver, lambda d: len(listed_sessions(d)) == 50 and d.execute_script(IDLE))
    driver.execute_script(SLOW_DOWN)
    driver.find_element(By.ID, "f-live").click()
    wait_for(driver, lambda d: d.execute_script("return window.slowApi.nowByPath['/v1/traces/sessions']") == 1)
    store_one("m070")   # listed: active again while the refresh is on its way, on top after the next one
    driver.find_element(By.ID, "more-sessions").click()
    driver.find_element(By.ID, "more-sessions").click()
    wait_for(driver, lambda d: d.execute_script("const api = window.slowApi; return api.askedByPath["
             "'/v1/traces/sessions'] >= 3 && !api.nowByPath['/v1/traces/sessions']"), timeout_s=LIVE_WAIT_S)
    api = driver.execute_script("return window.slowApi")
    assert api["mostByPath"].get("/v1/traces/sessions") == 1, f"list pages in flight at once: {api}"
    expected = ["m070"] + [f"m{i:03d}" for i in reversed(range(MANY)) if i != 70]
    wait_for(driver, lambda d: listed_sessions(d) == expected and
             not d.find_element(By.ID, "more-sessions").is_displayed(), timeout_s=LIVE_WAIT_S)
    assert driver.current_url.endswith("/ui#/?rows=150")   # three pages asked for, all shown


def test_a_live_refresh_the_gateway_never_answers_fails_and_the_next_one_runs(served, slow_driver):
    """The old page's fetch had no time limit: one the gateway never answered kept its
    refresh in flight for good, and Live skipped every tick after it."""
    from selenium.webdriver.common.by import By

    driver = slow_driver
    store_step, base_url = served
    with in_every_page(driver, SHORT_TIMEOUTS):
        connect(driver, base_url, "k-acme")
        driver.get(f"{base_url}/ui#/session/acme/slow")
        wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 1)
        driver.execute_script("""
            window.statuses = [];   // every text the status line shows, kept
            new MutationObserver(() => window.statuses.push(document.getElementById('status').textContent))
              .observe(document.getElementById('status'), {childList: true, characterData: true, subtree: true});
            window.slowApi.hang = 1;   // the next /v1/ request: never answered""")
        driver.find_element(By.ID, "live").click()
        store_step()   # step #1: only a refresh after the hung one shows it
        wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 2,
                 timeout_s=LIVE_WAIT_S)
        shown = driver.execute_script("return window.statuses")
        said = "the gateway did not answer in 30 s"
        assert said in shown and "" in shown[shown.index(said):], shown   # said so, then cleared
        assert driver.find_element(By.ID, "status").text == ""
