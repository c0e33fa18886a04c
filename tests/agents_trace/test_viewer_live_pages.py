"""Live keeps working with more than one page loaded (headless Chromium, QA110 M1, M2, L1):
the sessions list merges new and active-again sessions at the top and keeps the pages
loaded below, and an open session viewed before its last page keeps its summary and
"Showing steps … of N" up to date, its new steps behind "Load more steps", each once."""
from __future__ import annotations

import contextlib

import httpx

from agents_trace.records import StepResult
from tests.agents_trace.browser import chromium_fixture, connect, page_fixture, wait_for  # noqa: F401 (fixtures)
from tests.agents_trace.helpers import ManualClock, listed_sessions, make_tracer, one_step_sessions, viewer_app
from tests.agents_trace.long_sessions import add_user_turns
from tests.agents_trace.test_viewer_page import KEYS
from tests.gateway.serving import start_server

LIVE_WAIT_S = 10   # Live asks every 2 s (browser.LIVE_TICK_MS here): a few rounds


@contextlib.contextmanager
def open_session_list(tmp_path, driver, names: list[str]):
    """The viewer's sessions list open in `driver` (headless Chromium, tenant "acme"'s key)
    over a store of one-step sessions `names`, its first page shown: (the driver, the
    server's base URL, `step(name)`: one more step of a session, flushed to the store)."""
    tracer, add_step = one_step_sessions(tmp_path, names)

    def step(name: str) -> None:
        add_step(name)
        assert tracer.flush(5.0)

    server = start_server(viewer_app(tracer, KEYS))
    try:
        connect(driver, server.base_url, "k-acme")
        wait_for(driver, lambda d: len(listed_sessions(d)) == min(len(names), 50))
        yield driver, server.base_url, step
    finally:
        server.stop()
        tracer.stop()


def delete_session(base_url: str, name: str) -> None:
    assert httpx.delete(f"{base_url}/v1/traces/sessions/{name}",
                        headers={"authorization": "Bearer k-acme"}).status_code == 200


def test_a_live_list_with_two_pages_loaded_merges_new_sessions_on_top_and_keeps_the_rest(tmp_path, driver):
    """60 sessions, both pages loaded, Live on: a new session, one of page 2 active again
    and one of page 1 deleted show at the next refresh; every other row stays, each once."""
    from selenium.webdriver.common.by import By

    first = [f"g-{i:03d}" for i in range(60)]
    with open_session_list(tmp_path, driver, first) as (driver, base_url, step):
        driver.find_element(By.ID, "more-sessions").click()
        wait_for(driver, lambda d: len(listed_sessions(d)) == 60)
        driver.find_element(By.ID, "f-live").click()
        delete_session(base_url, "g-050")   # first: the refresh that shows new-1 (last) sees all three
        step("g-003")   # on page 2: active again
        step("new-1")   # an agent starts
        wait_for(driver, lambda d: listed_sessions(d)[:1] == ["new-1"], timeout_s=LIVE_WAIT_S)
        shown = listed_sessions(driver)
        assert driver.find_element(By.ID, "more-sessions").get_attribute("hidden") is not None
        assert driver.find_element(By.ID, "f-live").is_selected()
    assert shown == ["new-1", "g-003"] + [name for name in first[::-1] if name not in ("g-003", "g-050")]


def test_load_more_after_a_live_merge_goes_on_after_the_last_row_listed(tmp_path, driver):
    """55 sessions, 50 listed, Live on: a new session goes on top (51 rows, none pushed
    off), and "Load more sessions" then adds the 5 not listed yet, each once, in order."""
    from selenium.webdriver.common.by import By

    first = [f"g-{i:03d}" for i in range(55)]
    with open_session_list(tmp_path, driver, first) as (driver, _, step):
        driver.find_element(By.ID, "f-live").click()
        step("new-1")
        wait_for(driver, lambda d: listed_sessions(d)[:1] == ["new-1"], timeout_s=LIVE_WAIT_S)
        assert listed_sessions(driver) == ["new-1"] + first[::-1][:50]
        driver.find_element(By.ID, "more-sessions").click()
        wait_for(driver, lambda d: len(listed_sessions(d)) > 51)
        shown = listed_sessions(driver)
    assert shown == ["new-1"] + first[::-1]


def test_live_hides_load_more_once_nothing_is_left_to_load(tmp_path, driver):
    """QA116: every session deleted under a Live list of one page (more to load): "No
    sessions match." came, but "Load more sessions" stayed, loading nothing when clicked."""
    from selenium.webdriver.common.by import By

    from agents_trace.store_delete import delete_sessions

    first = [f"g-{i:03d}" for i in range(52)]
    with open_session_list(tmp_path, driver, first) as (driver, base_url, _):
        assert driver.find_element(By.ID, "more-sessions").get_attribute("hidden") is None
        driver.find_element(By.ID, "f-live").click()
        delete_session(base_url, first[0])   # one through the API, the others in one go (the API's call)
        delete_sessions(tmp_path / "traces.sqlite3", [("acme", name) for name in first[1:]])
        wait_for(driver, lambda d: listed_sessions(d) == [], timeout_s=LIVE_WAIT_S)
        wait_for(driver, lambda d: d.find_element(By.ID, "more-sessions").get_attribute("hidden") is not None,
                 timeout_s=LIVE_WAIT_S)


def test_live_before_a_sessions_last_page_keeps_its_totals_and_puts_new_steps_behind_load_more(tmp_path, driver):
    """A session of 205 steps opened by its first step's request id shows #0 to #199; with
    Live on, 3 new steps update the summary and "Showing … of 208" at once, and "Load more
    steps" then shows #200 to #207, none twice; the session's end shows without leaving the
    page. (The list's window line says "1 session".)"""
    from selenium.webdriver.common.by import By

    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    ids = add_user_turns(tracer, clock, 205)

    def new_steps(count: int) -> None:
        for i in range(count):
            ctx = tracer.begin("acme", {"x-session-id": "long"},
                               {"model": "tiny", "messages": [{"role": "user", "content": f"more {i}"}]},
                               request_id=f"chatcmpl-more-{i}")
            clock.advance(0.2)
            tracer.end(ctx, StepResult(num_input_tokens=7, num_output_tokens=1, ttft_s=0.05, worker="w0",
                                       finish_reason="stop", output_text="ok", response_id=f"chatcmpl-more-{i}"))
            clock.advance(1.0)
        assert tracer.flush(5.0)

    def rows(d) -> list[str]:
        return d.execute_script("return [...document.querySelectorAll('#steps tr.step-row')].map(r => r.dataset.step)")

    server = start_server(viewer_app(tracer, KEYS))
    try:
        connect(driver, server.base_url, "k-acme")
        line = wait_for(driver, lambda d: d.find_element(By.ID, "window-stats").text)
        assert line.startswith("Steps in this window: 205 in 1 session · ") and "· 0 errors" in line
        driver.get(f"{server.base_url}/ui#/session/acme/long?request={ids[0]}")
        wait_for(driver, lambda d: len(rows(d)) == 200)
        assert not driver.find_element(By.ID, "more-steps").get_attribute("hidden")
        driver.find_element(By.ID, "live").click()
        new_steps(3)
        wait_for(driver, lambda d: "208 steps" in d.find_element(By.ID, "session-summary").text,
                 timeout_s=LIVE_WAIT_S)
        assert driver.find_element(By.ID, "steps-shown").text == \
            "Showing steps #0 to #199 (200 of 208, in index order)."
        assert rows(driver) == [str(i) for i in range(200)]   # the new steps wait behind "Load more"
        tracer.stop()   # the gateway stops: the session ends, the page says so and stays where it is
        wait_for(driver, lambda d: d.find_element(By.ID, "session-summary").text.endswith("ended (shutdown)"),
                 timeout_s=LIVE_WAIT_S)
        assert driver.find_element(By.ID, "live").is_selected()   # still on: it may go on (QA205 F6)
        assert rows(driver) == [str(i) for i in range(200)]
        driver.find_element(By.ID, "more-steps").click()
        wait_for(driver, lambda d: len(rows(d)) == 208)
        assert rows(driver) == [str(i) for i in range(208)]
        assert driver.find_element(By.ID, "more-steps").get_attribute("hidden") is not None
    finally:
        server.stop()
        tracer.stop()
