"""The viewer page as sessions change under it (headless Chromium): a live session page
and list show new steps and sessions without a reload, also a session that ended idle and
goes on under its id, and "Load more sessions" goes on after the last row shown whatever
moved meanwhile."""
from __future__ import annotations

from tests.agents_trace.browser import chromium_fixture, connect, page_fixture, wait_for  # noqa: F401 (fixtures)
from tests.agents_trace.helpers import (ManualClock, idle_out, listed_sessions, make_tracer, run_scripted_session,
                                        viewer_app)
from tests.agents_trace.test_viewer_live_pages import delete_session, open_session_list
from tests.agents_trace.test_viewer_page import KEYS
from tests.gateway.serving import start_server


def test_a_live_session_page_shows_new_steps_as_they_arrive_and_keeps_open_messages_open(tmp_path, driver):
    from selenium.webdriver.common.by import By

    from agents_trace.records import StepResult

    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    messages = [{"role": "user", "content": "first question"}]

    def step(answer: str) -> None:
        ctx = tracer.begin("acme", {"x-session-id": "live"}, {"model": "tiny", "messages": list(messages)})
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=20 * len(messages), num_cached_tokens=0, num_output_tokens=2,
                                   ttft_s=0.1, worker="w0", finish_reason="stop", output_text=answer))
        messages.extend([{"role": "assistant", "content": answer}, {"role": "user", "content": "and then?"}])
        clock.advance(2.0)
        assert tracer.flush(5.0)

    step("first answer")
    server = start_server(viewer_app(tracer, KEYS))
    try:
        connect(driver, server.base_url, "k-acme")
        driver.get(f"{server.base_url}/ui#/session/acme/live")
        wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 1)
        assert driver.find_element(By.ID, "live-label").is_displayed()   # open: it can go live
        driver.find_element(By.ID, "live").click()
        driver.find_element(By.CSS_SELECTOR, "button.show-content").click()
        wait_for(driver, lambda d: "first answer" in d.find_element(By.ID, "steps").text)
        step("second answer")   # the agent's next step, stored while the page is open
        wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 2)
        assert "first answer" in driver.find_element(By.ID, "steps").text   # still open
        assert "2 steps" in driver.find_element(By.ID, "session-summary").text
        tracer.stop()           # the gateway stops: the session ends, the page says so
        wait_for(driver, lambda d: d.find_element(By.ID, "session-summary").text.endswith("ended (shutdown)"))
        assert driver.find_element(By.ID, "live").is_selected()   # still on: a restart may go on with it (QA205 F6)
    finally:
        server.stop()
        tracer.stop()


def test_live_stays_on_when_a_session_ends_idle_and_shows_it_going_on_under_its_id(tmp_path, driver):
    """QA205 F6: an idle end hid and cleared Live, so an agent going on after a wait longer
    than the idle timeout (a person approving) was not followed until a reload."""
    from selenium.webdriver.common.by import By

    from agents_trace.records import StepResult

    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, sweep_interval_s=0.02, session_idle_timeout_s=60.0)

    def step() -> None:
        ctx = tracer.begin("acme", {"x-session-id": "approval"},
                           {"model": "tiny", "messages": [{"role": "user", "content": "go on"}]})
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=9, num_output_tokens=2, ttft_s=0.1, worker="w0",
                                   finish_reason="stop", output_text="ok"))
        assert tracer.flush(5.0)

    def summary(d) -> str:
        return d.find_element(By.ID, "session-summary").text

    step()
    server = start_server(viewer_app(tracer, KEYS))
    try:
        connect(driver, server.base_url, "k-acme")
        driver.get(f"{server.base_url}/ui#/session/acme/approval")
        wait_for(driver, lambda d: summary(d).endswith("· open"))
        driver.find_element(By.ID, "live").click()
        idle_out(tracer, clock, 61.0)
        wait_for(driver, lambda d: summary(d).endswith("· ended (idle)"))
        assert driver.find_element(By.ID, "live-label").is_displayed()
        assert driver.find_element(By.ID, "live").is_selected()
        step()   # the agent goes on under its id: the session opens again
        wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 2)
        wait_for(driver, lambda d: summary(d).endswith("· open") and "2 steps" in summary(d))
    finally:
        server.stop()
        tracer.stop()


def test_a_live_sessions_list_shows_a_new_session_without_a_reload(tmp_path, driver):
    from selenium.webdriver.common.by import By

    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    run_scripted_session(tracer, clock, headers={"x-session-id": "first"})
    assert tracer.flush(5.0)
    server = start_server(viewer_app(tracer, KEYS))
    try:
        connect(driver, server.base_url, "k-acme")
        wait_for(driver, lambda d: d.find_elements(By.LINK_TEXT, "first"))
        driver.find_element(By.ID, "f-live").click()
        run_scripted_session(tracer, clock, headers={"x-session-id": "second"})   # an agent starts
        assert tracer.flush(5.0)
        wait_for(driver, lambda d: d.find_elements(By.LINK_TEXT, "second"))
        assert len(driver.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")) == 2   # replaced, not added
    finally:
        server.stop()
        tracer.stop()


def test_load_more_never_lists_a_session_twice_when_sessions_arrive_meanwhile(tmp_path, driver):
    """60 sessions, 50 listed; 5 new ones arrive, pushing 5 listed ones onto the API's next
    page: "Load more sessions" adds the 10 not listed yet, and no row twice."""
    from selenium.webdriver.common.by import By

    first = [f"g-{i:03d}" for i in range(60)]
    with open_session_list(tmp_path, driver, first) as (driver, _, step):
        for i in range(5):   # an agent starts 5 sessions while the list is open
            step(f"new-{i}")
        driver.find_element(By.ID, "more-sessions").click()
        wait_for(driver, lambda d: len(listed_sessions(d)) > 50)
        shown = listed_sessions(driver)
    assert len(shown) == len(set(shown)), sorted({n for n in shown if shown.count(n) > 1})
    assert shown == first[::-1]   # the newest first, each once


def test_load_more_goes_on_after_the_last_row_shown_whatever_moved_meanwhile(tmp_path, driver):
    """60 sessions, 50 listed; two listed ones are deleted and g-005 (not listed yet) is
    active again: "Load more sessions" adds every session after the last row shown (the
    API's cursor), none skipped (paging by offset lost g-009), and g-005 not at all (it
    moved to the top: a reload shows it)."""
    from selenium.webdriver.common.by import By

    first = [f"g-{i:03d}" for i in range(60)]
    with open_session_list(tmp_path, driver, first) as (driver, base_url, step):
        for gone in ("g-040", "g-041"):
            delete_session(base_url, gone)
        step("g-005")
        driver.find_element(By.ID, "more-sessions").click()
        wait_for(driver, lambda d: len(listed_sessions(d)) > 50)
        shown = listed_sessions(driver)
        assert driver.find_element(By.ID, "more-sessions").get_attribute("hidden") is not None
    assert shown == [name for name in first[::-1] if name != "g-005"]
