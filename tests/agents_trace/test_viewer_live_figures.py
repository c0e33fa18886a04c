"""The list's Live and the lines over it (headless Chromium, FI88): the window's figures
(/v1/traces/stats, a walk over every step in the window on the gateway) and the
forecasters' line are refreshed on a timer of their own, far less often than the rows
(app.js LIVE_FIGURES_INTERVAL_MS, every browser.LIVE_FIGURES_TICK_MS here), never while
the last ones are on their way; a load of the list asks for them at once and shows only
its own; the figures' line says when they were asked for. The /v1/ requests are counted
(and slowed where a test says) by test_viewer_live_slow.SLOW_API."""
from __future__ import annotations

import re
import time

from tests.agents_trace.browser import (LIVE_FIGURES_TICK_MS, LIVE_TICK_MS, chromium_fixture,  # noqa: F401
                                        connect, page_fixture, wait_for)
from tests.agents_trace.helpers import listed_sessions
from tests.agents_trace.test_viewer_live_slow import IDLE, LIVE_WAIT_S, served, slow_driver  # noqa: F401

STATS, FORECASTERS, SESSIONS = "/v1/traces/stats", "/v1/traces/forecasters", "/v1/traces/sessions"
ROW_TICKS = 12   # Live ticks watched: three figures ticks
RESET_COUNTS = "Object.assign(window.slowApi, { delayByPath: arguments[0] || {}, mostByPath: {}, askedByPath: {} })"
AS_OF = re.compile(r" · as of (\d{1,2}:\d{2}:\d{2}.*)$")


def asked(driver) -> dict[str, int]:
    return driver.execute_script("return window.slowApi.askedByPath")


def open_list(driver, base_url: str) -> None:
    connect(driver, base_url, "k-acme")
    wait_for(driver, lambda d: len(listed_sessions(d)) == 1 and d.execute_script(IDLE))


def test_a_live_list_asks_for_its_figures_far_less_often_than_for_its_rows(served, slow_driver):
    """The old refresh asked for the window's figures and the forecasters with every tick's
    rows: on a big store, one whole-store stats walk after the other for as long as the tab
    stayed open."""
    from selenium.webdriver.common.by import By

    driver = slow_driver
    _, base_url = served
    open_list(driver, base_url)
    driver.execute_script(RESET_COUNTS)
    driver.find_element(By.ID, "f-live").click()
    time.sleep(ROW_TICKS * LIVE_TICK_MS / 1000)
    counts = asked(driver)
    figure_ticks = ROW_TICKS * LIVE_TICK_MS // LIVE_FIGURES_TICK_MS
    assert counts.get(SESSIONS, 0) >= ROW_TICKS // 2, counts   # the rows: every tick
    for path in (STATS, FORECASTERS):
        assert 1 <= counts.get(path, 0) <= figure_ticks, f"{path} asked for too often (or never): {counts}"


def test_figures_slower_than_their_timer_are_not_asked_for_again_on_their_way(served, slow_driver):
    """Figures that take longer than their own interval: the next tick of their timer asks
    for none, so one tab never has two whole-store walks going."""
    from selenium.webdriver.common.by import By

    driver = slow_driver
    _, base_url = served
    open_list(driver, base_url)
    late = 3 * LIVE_FIGURES_TICK_MS
    driver.execute_script(RESET_COUNTS, {STATS: late, FORECASTERS: late})
    driver.find_element(By.ID, "f-live").click()
    wait_for(driver, lambda d: asked(d).get(STATS, 0) >= 2, timeout_s=LIVE_WAIT_S)
    api = driver.execute_script("return window.slowApi")
    assert api["mostByPath"].get(STATS) == 1 and api["mostByPath"].get(FORECASTERS) == 1, api
    assert api["askedByPath"][SESSIONS] >= late // LIVE_TICK_MS, f"the rows waited for the figures: {api}"


def test_an_empty_live_list_still_refreshes_its_figures(served, slow_driver):
    """A list with no rows reloads whole on each Live tick (list.js `refreshRows`), which
    sets Live again (app.js `setLive`): that keeps the figures' timer, not restarting it
    every tick (it would never fire)."""
    from selenium.webdriver.common.by import By

    driver = slow_driver
    _, base_url = served
    connect(driver, base_url, "k-acme")
    driver.get(f"{base_url}/ui#/?agent=no-such-agent")
    wait_for(driver, lambda d: d.find_element(By.ID, "status").text == "No sessions match." and
             d.execute_script(IDLE))
    driver.execute_script(RESET_COUNTS)
    driver.find_element(By.ID, "f-live").click()
    wait_for(driver, lambda d: asked(d).get(STATS, 0) >= 2, timeout_s=LIVE_WAIT_S)
    assert listed_sessions(driver) == []


def test_the_figures_line_says_when_it_was_asked_for_and_live_moves_it_on(served, slow_driver):
    """The old line gave no time: under Live its rows were newer than its figures."""
    from selenium.webdriver.common.by import By

    driver = slow_driver
    _, base_url = served
    open_list(driver, base_url)
    first = wait_for(driver, lambda d: d.find_element(By.ID, "window-stats").text)
    assert first.startswith("Steps in this window: 1 in 1 session · ")
    match = AS_OF.search(first)
    assert match, first
    driver.find_element(By.ID, "f-live").click()
    wait_for(driver, lambda d: (AS_OF.search(d.find_element(By.ID, "window-stats").text) or match).group(1)
             != match.group(1), timeout_s=LIVE_WAIT_S)


def test_a_list_loaded_while_its_last_figures_are_on_their_way_shows_only_its_own(served, slow_driver):
    """The unfiltered list's figures come late; a filter applied meanwhile asks for its
    own at once. The old page wrote whichever came last: the unfiltered list's figures
    over the filtered list."""
    from selenium.webdriver.common.by import By

    driver = slow_driver
    _, base_url = served
    open_list(driver, base_url)
    late = 4 * LIVE_TICK_MS
    driver.execute_script(RESET_COUNTS, {STATS: late})
    driver.find_element(By.CSS_SELECTOR, "#filters button[type=submit]").click()   # the list again, no filter
    wait_for(driver, lambda d: d.execute_script(f"return window.slowApi.nowByPath['{STATS}'] === 1"))
    driver.execute_script(RESET_COUNTS)   # the next ones at once
    driver.get(f"{base_url}/ui#/?agent=no-such-agent")
    wait_for(driver, lambda d: d.find_element(By.ID, "status").text == "No sessions match.")
    wait_for(driver, lambda d: d.execute_script(IDLE), timeout_s=LIVE_WAIT_S)   # the late figures came too
    assert asked(driver).get(STATS) == 1   # the filtered list's own, asked for at once
    line = driver.find_element(By.ID, "window-stats").text
    assert "1 in 1 session" not in line, f"the last list's figures shown over this one: {line!r}"
