"""Sessions whose id is only "." or ".." (the gateway accepts them; a browser drops such a
path segment, even encoded) are listed, and opening one says it cannot be opened in a
browser and how to read it (`stepahead traces show`), not a raw TypeError (QA155 #3: "."
asked for the sessions list, whose answer the page read as a session); an answer that is
not a session is an error that says so."""
from __future__ import annotations

from tests.agents_trace.browser import chromium_fixture, connect, page_fixture, wait_for  # noqa: F401 (fixtures)
from tests.agents_trace.helpers import ManualClock, listed_sessions, make_tracer, run_scripted_session, viewer_app
from tests.agents_trace.test_viewer_page import KEYS
from tests.gateway.serving import start_server


def click_link(driver, text: str) -> None:
    """Click the list's link `text`, found again if the list re-rendered it meanwhile (a
    click on the replaced element is stale: `wait_for` looks again)."""
    from selenium.webdriver.common.by import By
    wait_for(driver, lambda d: d.find_element(By.LINK_TEXT, text).click() or True)


def test_a_session_whose_id_is_a_dot_or_two_says_how_to_read_it(tmp_path, driver):
    from selenium.webdriver.common.by import By

    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    for session in (".", "..", "plain"):
        run_scripted_session(tracer, clock, headers={"x-session-id": session})
    assert tracer.flush(5.0)
    server = start_server(viewer_app(tracer, KEYS))
    try:
        connect(driver, server.base_url, "k-acme")
        wait_for(driver, lambda d: sorted(listed_sessions(d)) == [".", "..", "plain"])
        for session in (".", ".."):
            driver.get(f"{server.base_url}/ui#/")
            wait_for(driver, lambda d: len(listed_sessions(d)) == 3)
            click_link(driver, session)
            status = wait_for(driver, lambda d: d.find_element(By.ID, "status").text not in ("", "loading…")
                              and d.find_element(By.ID, "status").text)
            assert f'Session "{session}" cannot be opened in a browser' in status
            assert f"stepahead traces show {session} --tenant acme" in status
            assert "TypeError" not in status and "Cannot read properties" not in status
            assert not driver.find_element(By.ID, "session-view").is_displayed()
        # the sessions list's answer (what "." asked for) is no session: an error that says so
        said = driver.execute_script("try { sessionReply({object: 'list', data: [], has_more: false}); "
                                     "return 'accepted'; } catch (e) { return e.message; }")
        assert said.startswith("The gateway's answer is not a session")
        driver.find_element(By.ID, "brand").click()   # the others open as ever
        wait_for(driver, lambda d: len(listed_sessions(d)) == 3)
        click_link(driver, "plain")
        wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 3)
    finally:
        server.stop()
        tracer.stop()
