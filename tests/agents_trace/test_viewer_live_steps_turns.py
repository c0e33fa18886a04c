"""A session's "Load more steps" and "Load earlier steps" take their turn with Live
(headless Chromium, FI84; app.js `inTurn`): clicked while a slow Live refresh is on its
way, each waits for it, two clicks load two pages (each from where the last one ended),
and the page never has two requests for the session in flight at once. The slow gateway
is test_viewer_live_slow.py's (`SLOW_API`, `SLOW_DOWN`)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from agents_trace.records import StepResult
from tests.agents_trace.browser import chromium_fixture, connect, page_fixture, wait_for  # noqa: F401 (fixtures)
from tests.agents_trace.helpers import ManualClock, make_tracer, served_viewer
from tests.agents_trace.long_sessions import add_user_turns
from tests.agents_trace.test_viewer_live_slow import (  # noqa: F401 (slow_driver: a fixture)
    IDLE, LIVE_WAIT_S, RECORD_STEPS, SLOW_DOWN, slow_driver)
from tests.agents_trace.test_viewer_page import KEYS

STEPS = 401   # three pages of the viewer's 200: #0-#199, #200-#399, #400
PATH = "/v1/traces/sessions/long"
# every state "Load more steps" was in, in order ("shown", "hidden"), changes only
RECORD_MORE = """
const states = window.moreStates = [];
const button = document.getElementById('more-steps');
const note = () => {
  const state = button.hidden ? "hidden" : "shown";
  if (states[states.length - 1] !== state) states.push(state);
};
note();
new MutationObserver(note).observe(button, { attributes: true, attributeFilter: ['hidden'] });
"""


@pytest.fixture
def served_long(tmp_path) -> Iterator[tuple]:
    """(a function that stores one more step of session "long" of tenant acme, the
    viewer's base URL), its first STEPS steps stored."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    add_user_turns(tracer, clock, STEPS)

    def store_one() -> None:
        ctx = tracer.begin("acme", {"x-session-id": "long"},
                           {"model": "tiny", "messages": [{"role": "user", "content": "one more"}]})
        clock.advance(0.2)
        tracer.end(ctx, StepResult(num_input_tokens=7, num_output_tokens=1, ttft_s=0.05, worker="w0",
                                   finish_reason="stop", output_text="ok"))
        clock.advance(1.0)
        assert tracer.flush(5.0)

    with served_viewer(tracer, KEYS) as base_url:
        yield store_one, base_url


def steps_shown(driver) -> list[str]:
    return driver.execute_script("return [...document.querySelectorAll('#steps tr.step-row')].map(r => r.dataset.step)")


def click_twice_beside_a_slow_refresh(driver, button: str, store_one) -> None:
    """Live on, replies SLOW_TICKS ticks late: once a refresh is on its way, a new step
    stored and `button` clicked twice; back when the clicks' pages have come (the session
    asked for three times or more, nothing in flight)."""
    from selenium.webdriver.common.by import By

    driver.execute_script(RECORD_STEPS)
    driver.execute_script(SLOW_DOWN)
    driver.find_element(By.ID, "live").click()
    wait_for(driver, lambda d: d.execute_script(f"return window.slowApi.nowByPath['{PATH}']") == 1)
    store_one()   # while the refresh is on its way
    driver.find_element(By.ID, button).click()
    driver.find_element(By.ID, button).click()
    wait_for(driver, lambda d: d.execute_script(f"const api = window.slowApi; return api.askedByPath['{PATH}'] >= 3 "
                                                f"&& !api.nowByPath['{PATH}']"), timeout_s=LIVE_WAIT_S)


def runs(indexes: list[int]) -> str:
    """`indexes` as runs of consecutive ones: "0-199, 200-399, 200-399"."""
    said = []
    for i, index in enumerate(indexes):
        if i and index == indexes[i - 1] + 1:
            said[-1][1] = index
        else:
            said.append([index, index])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in said)


def assert_each_step_once_in_order(driver) -> None:
    """Every steps table shown since RECORD_STEPS: one run of steps, each once, in index order."""
    seen = [[int(i) for i in shown.split(",") if i] for shown in driver.execute_script("return window.stepsSeen")]
    for indexes in seen:
        first = indexes[0] if indexes else 0
        assert indexes == list(range(first, first + len(indexes))), \
            f"steps shown twice, skipped or out of order: {[runs(shown) for shown in seen]}"


def test_load_more_steps_waits_for_a_slow_live_refresh_and_two_clicks_load_two_pages(served_long, slow_driver):
    """401 steps, #0-#199 shown, "Load more steps" clicked twice while a slow Live refresh
    is on its way: the old page sent both beside it, from the same step (#200-#399 shown
    twice), and the refresh that landed after them showed the button again."""
    from selenium.webdriver.common.by import By

    driver = slow_driver
    store_one, base_url = served_long
    connect(driver, base_url, "k-acme")
    driver.get(f"{base_url}/ui#/session/acme/long")
    wait_for(driver, lambda d: len(steps_shown(d)) == 200 and d.execute_script(IDLE))
    driver.execute_script(RECORD_MORE)
    click_twice_beside_a_slow_refresh(driver, "more-steps", store_one)
    assert_each_step_once_in_order(driver)
    api = driver.execute_script("return window.slowApi")
    assert api["mostByPath"].get(PATH) == 1, f"session pages in flight at once: {api}"
    every = [str(i) for i in range(STEPS + 1)]
    wait_for(driver, lambda d: steps_shown(d) == every, timeout_s=LIVE_WAIT_S)
    assert not driver.find_element(By.ID, "more-steps").is_displayed()
    assert driver.execute_script("return window.moreStates") == ["shown", "hidden"], "shown again once all loaded"
    assert f"{STEPS + 1} steps" in driver.find_element(By.ID, "session-summary").text


def test_load_earlier_steps_waits_for_a_slow_live_refresh_and_two_clicks_load_two_pages(served_long, slow_driver):
    """The session opened at its last page (#400, by its request id), "Load earlier steps"
    clicked twice while a slow Live refresh is on its way: the old page sent both beside
    it, from the same step (#200-#399 shown twice, #0-#199 never)."""
    from selenium.webdriver.common.by import By

    driver = slow_driver
    store_one, base_url = served_long
    connect(driver, base_url, "k-acme")
    driver.get(f"{base_url}/ui#/session/acme/long?request=chatcmpl-long-{STEPS - 1}")
    wait_for(driver, lambda d: steps_shown(d) == [str(STEPS - 1)] and d.execute_script(IDLE))
    click_twice_beside_a_slow_refresh(driver, "earlier-steps", store_one)
    assert_each_step_once_in_order(driver)
    api = driver.execute_script("return window.slowApi")
    assert api["mostByPath"].get(PATH) == 1, f"session pages in flight at once: {api}"
    every = [str(i) for i in range(STEPS + 1)]
    wait_for(driver, lambda d: steps_shown(d) == every, timeout_s=LIVE_WAIT_S)
    assert not driver.find_element(By.ID, "earlier-steps").is_displayed()
    assert f"{STEPS + 1} steps" in driver.find_element(By.ID, "session-summary").text


def test_a_live_refresh_waits_for_load_more_steps_and_never_shows_the_button_again(served_long, slow_driver):
    """#200-#399 shown (opened by #200's request id), "Load more steps" clicked, a step
    stored and Live ticked on while its page is on its way: the old page's refresh, sent
    beside it, landed after it and showed "Load more steps" again, every step loaded."""
    from selenium.webdriver.common.by import By

    driver = slow_driver
    store_one, base_url = served_long
    connect(driver, base_url, "k-acme")
    driver.get(f"{base_url}/ui#/session/acme/long?request=chatcmpl-long-200")
    wait_for(driver, lambda d: len(steps_shown(d)) == 200 and d.execute_script(IDLE))
    driver.execute_script(RECORD_MORE)
    driver.execute_script(SLOW_DOWN)
    driver.find_element(By.ID, "more-steps").click()
    store_one()
    driver.find_element(By.ID, "live").click()   # its first tick comes before the page
    wait_for(driver, lambda d: d.execute_script(f"const api = window.slowApi; return api.askedByPath['{PATH}'] >= 3 "
                                                f"&& !api.nowByPath['{PATH}']"), timeout_s=LIVE_WAIT_S)
    assert driver.execute_script("return window.moreStates") == ["shown", "hidden"], "shown again once all loaded"
    assert steps_shown(driver) == [str(i) for i in range(200, STEPS + 1)]   # the new one by Live
    api = driver.execute_script("return window.slowApi")
    assert api["mostByPath"].get(PATH) == 1, f"session pages in flight at once: {api}"
