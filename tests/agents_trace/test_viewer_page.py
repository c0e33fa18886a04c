"""The /ui page in headless Chromium against a traced session (library-level app): a
session's timeline, finding a session by part of its id or a request id, the window's
figures and the export, and what a failure shows. Split by concept (house style): the
forecasters' line test_viewer_forecasters.py, odd ids and escaped text
test_viewer_odd_text.py, the list's address (Back, reload, a shared link)
test_viewer_list_history.py."""
from __future__ import annotations

import httpx
import pytest

from agents_trace.api import Viewer
from cache.forecast import Forecast

from tests.agents_trace.browser import chromium_fixture, connect, page_fixture, wait_for  # noqa: F401 (fixtures)
from tests.agents_trace.helpers import (ManualClock, make_tracer, run_scripted_session, served_viewer,
                                        session_with_an_eviction, viewer_app)
from tests.agents_trace.long_sessions import add_user_turns
from tests.gateway.serving import start_server

KEYS = {"k-acme": Viewer("acme"), "k-globex": Viewer("globex")}


@pytest.fixture(name="served", scope="module")
def served_fixture(tmp_path_factory):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path_factory.mktemp("page"), clock, capture_content=True)
    # a cold model's forecast, as the gateway's predictor makes it for a new tenant
    tracer.set_forecaster(lambda tenant, session, now_s: Forecast(
        tenant, session, now_s, next_step={"END": 0.3, "tool:get_weather": 0.2}, p_end=0.3, confident=False))
    contexts = run_scripted_session(tracer, clock, headers={"x-agent-name": "travel"})
    assert tracer.flush(5.0)
    with served_viewer(tracer, KEYS) as base_url:
        yield base_url, contexts[0].session


def test_viewer_page_shows_a_session_timeline(served, tmp_path, driver):
    from selenium.webdriver.common.by import By
    base_url, session = served
    connect(driver, base_url, "k-acme")
    link = wait_for(driver, lambda d: d.find_element(By.LINK_TEXT, session))
    link.click()
    wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 3)
    steps_text = driver.find_element(By.ID, "steps").text
    for expected in ("get_weather", "book_table", "tool:get_weather", "text answer"):
        assert expected in steps_text
    model_cells = driver.execute_script(
        "const at = [...document.querySelectorAll('#steps thead th')].findIndex(h => h.textContent === 'Model');"
        "return [...document.querySelectorAll('#steps tr.step-row')].map(r => r.children[at].textContent)")
    assert model_cells == ["tiny"] * 3   # the model each step ran on, beside its worker
    assert len(driver.find_elements(By.CSS_SELECTOR, "#gantt-svg .gantt-row")) == 3
    assert len(driver.find_elements(By.CSS_SELECTOR, "#gantt-svg .tool-bar")) == 2
    assert "get_weather" in driver.find_element(By.ID, "gantt").text
    ticks = [t.text for t in driver.find_elements(By.CSS_SELECTOR, "#gantt-svg .gantt-tick")]
    assert ticks and ticks[0] == "0 s" and all(t.endswith(" s") for t in ticks)
    steps = [float(t.removesuffix(" s")) for t in ticks]
    spacing = {round(b - a, 6) for a, b in zip(steps, steps[1:])}
    assert len(spacing) == 1 and spacing.pop() in (1, 2, 5, 10)   # round ticks for a ~7 s session
    assert "END (30%) · not confident" in steps_text  # a cold guess is marked as one
    summary = driver.find_element(By.ID, "session-summary").text
    assert "forecasts right 0/2 (none made confident)" in summary
    driver.find_elements(By.CSS_SELECTOR, "button.show-content")[1].click()
    wait_for(driver, lambda d: "result of get_weather" in d.find_element(By.ID, "steps").text)
    driver.save_screenshot(str(tmp_path / "timeline.png"))
    assert (tmp_path / "timeline.png").stat().st_size > 10_000
    connect(driver, base_url, "k-globex")
    wait_for(driver, lambda d: d.find_element(By.ID, "status").text == "No sessions yet.")   # none, no filter
    driver.get(f"{base_url}/ui#/session/acme/{session}")
    wait_for(driver, lambda d: "not found" in d.find_element(By.ID, "status").text)
    response = httpx.get(f"{base_url}/v1/traces/sessions/{session}",
                         headers={"authorization": "Bearer k-globex"}, timeout=10)
    assert response.status_code == 404


def test_viewer_finds_a_session_by_part_of_its_id_or_by_a_request_id(served, driver):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.expected_conditions import staleness_of
    base_url, session = served
    connect(driver, base_url, "k-acme")
    wait_for(driver, lambda d: d.find_elements(By.LINK_TEXT, session))
    driver.find_element(By.ID, "f-id").send_keys("no-such-session")
    driver.find_element(By.CSS_SELECTOR, "#filters button[type=submit]").click()
    wait_for(driver, lambda d: "No sessions match." in d.find_element(By.ID, "status").text)
    driver.find_element(By.ID, "f-id").clear()
    driver.find_element(By.ID, "f-id").send_keys(session[-5:])
    driver.find_element(By.CSS_SELECTOR, "#filters button[type=submit]").click()
    wait_for(driver, lambda d: d.find_elements(By.LINK_TEXT, session))
    # by a request id (a reply's x-request-id): its session, and in it the step marked
    steps = httpx.get(f"{base_url}/v1/traces/sessions/{session}", headers={"authorization": "Bearer k-acme"},
                      timeout=10).json()["steps"]["data"]
    driver.find_element(By.ID, "f-id").clear()
    driver.find_element(By.ID, "f-id").send_keys(steps[1]["response_id"])
    shown = driver.find_element(By.CSS_SELECTOR, "#sessions tbody tr")   # the last search's one row
    driver.find_element(By.CSS_SELECTOR, "#filters button[type=submit]").click()
    wait_for(driver, staleness_of(shown))   # not that row: this search's (its link went stale once)
    wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")) == 1)
    driver.find_element(By.LINK_TEXT, session).click()
    wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 3)
    [found] = driver.find_elements(By.CSS_SELECTOR, "#steps tr.step-row.found")
    assert found.get_attribute("data-step") == "1"
    cell = found.find_element(By.TAG_NAME, "td")
    assert cell.get_attribute("title") == "request " + steps[1]["response_id"]


def _open_by_request_id(driver, request_id: str, session: str) -> None:
    """Filter the list by `request_id` the way a person would, and open its one session."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.expected_conditions import staleness_of
    shown = wait_for(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#sessions tbody tr"))
    driver.find_element(By.ID, "f-id").clear()
    driver.find_element(By.ID, "f-id").send_keys(request_id)
    driver.find_element(By.CSS_SELECTOR, "#filters button[type=submit]").click()
    wait_for(driver, staleness_of(shown))   # this search's row, not the last one's
    wait_for(driver, lambda d: d.find_element(By.LINK_TEXT, session)).click()


def test_viewer_outlines_the_step_a_request_id_names_wherever_it_lies(tmp_path, driver):
    """300 steps, 200 to a page: step 250 is on the second page, which the page opens on."""
    from selenium.webdriver.common.by import By

    def shown(d, rows: str = "tr.step-row") -> list[str]:
        """The steps of those rows, read at once (a render may replace them between reads)."""
        return d.execute_script(f"return [...document.querySelectorAll('#steps {rows}')].map(r => r.dataset.step)")

    def outlined(d) -> list[str]:
        return shown(d, "tr.found")

    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    request_ids = add_user_turns(tracer, clock, 300)
    server = start_server(viewer_app(tracer, KEYS))
    in_view = "const r = arguments[0].getBoundingClientRect(); return r.top >= 0 && r.bottom <= innerHeight;"
    try:
        connect(driver, server.base_url, "k-acme")
        _open_by_request_id(driver, request_ids[250], "long")
        wait_for(driver, lambda d: outlined(d) == ["250"])
        assert shown(driver) == [str(i) for i in range(200, 300)]
        [found] = driver.find_elements(By.CSS_SELECTOR, "#steps tr.found")
        assert driver.execute_script(in_view, found)   # scrolled to it
        assert found.find_element(By.TAG_NAME, "td").get_attribute("title") == "request " + request_ids[250]
        # the line numbers the steps as their rows and the timeline do (#200 is the 201st)
        assert driver.find_element(By.ID, "steps-shown").text == \
            "Showing steps #200 to #299 (100 of 300, in index order)."
        assert not driver.find_element(By.ID, "more-steps").is_displayed()
        assert driver.current_url.endswith("#/session/acme/long?request=" + request_ids[250])
        driver.refresh()   # the URL keeps the request id: the same page, the same step outlined
        wait_for(driver, lambda d: outlined(d) == ["250"])
        assert shown(driver) == [str(i) for i in range(200, 300)]
        driver.find_element(By.ID, "earlier-steps").click()   # the steps before it, in front
        wait_for(driver, lambda d: len(shown(d)) == 300)
        assert shown(driver) == [str(i) for i in range(300)]
        assert outlined(driver) == ["250"] and driver.find_element(By.ID, "steps-shown").text == ""
        assert not driver.find_element(By.ID, "earlier-steps").is_displayed()
        assert len(driver.find_elements(By.CSS_SELECTOR, "#gantt-svg .gantt-row")) == 300
        driver.find_element(By.CSS_SELECTOR, "header .brand").click()   # back to the list
        _open_by_request_id(driver, request_ids[50], "long")   # on the first page, as before
        wait_for(driver, lambda d: outlined(d) == ["50"])
        assert len(shown(driver)) == 200 and driver.find_element(By.ID, "more-steps").is_displayed()
        assert not driver.find_element(By.ID, "earlier-steps").is_displayed()
        driver.find_element(By.ID, "more-steps").click()
        wait_for(driver, lambda d: len(shown(d)) == 300)
        assert outlined(driver) == ["50"]
    finally:
        server.stop()
        tracer.stop()


def test_viewer_sums_the_window_and_exports_the_sessions_that_match_its_filters(served, driver):
    from selenium.webdriver.common.by import By
    base_url, session = served
    connect(driver, base_url, "k-acme")
    wait_for(driver, lambda d: d.find_elements(By.LINK_TEXT, session))
    stats = wait_for(driver, lambda d: d.find_element(By.ID, "window-stats").text)
    # the scripted session: 100 + 200 + 300 prompt tokens, 0 + 80 + 160 cached, TTFT 100 ms each
    assert stats.startswith("Steps in this window: 3 in 1 session · 600 prompt tokens, 40% cached · "
                            "TTFT p50 100.0 ms, p99 100.0 ms · 0 errors · forecasts right 0/2")
    # keep what the page fetches for its download, instead of saving a file
    driver.execute_script("""
        window.exported = [];
        const realFetch = window.fetch;
        window.fetch = async (path, init) => {
          const response = await realFetch(path, init);
          if (String(path).startsWith('/v1/traces/export')) {
            window.exported.push([String(path), await response.clone().text()]);
          }
          return response;
        };""")
    driver.find_element(By.ID, "f-agent").send_keys("travel")
    driver.find_element(By.CSS_SELECTOR, "#filters button[type=submit]").click()   # the filters applied
    wait_for(driver, lambda d: "agent=travel" in d.current_url)
    driver.find_element(By.ID, "export-all-link").click()
    path, text = wait_for(driver, lambda d: (d.execute_script("return window.exported") or [None])[0])
    assert path == "/v1/traces/export?agent_contains=travel"   # part of a name (FI67)
    header, *requests = text.splitlines()
    assert header.startswith('{"format":"stepahead-trace/1"')
    assert len(requests) == 3 and all(f'"session":"{session}"' in line for line in requests)


def test_viewer_marks_the_step_whose_prefix_was_evicted_as_the_api_counts_it(tmp_path, driver):
    from selenium.webdriver.common.by import By
    store, _ = session_with_an_eviction(tmp_path)
    server = start_server(viewer_app(store, KEYS))
    try:
        steps = httpx.get(f"{server.base_url}/v1/traces/sessions/s", headers={"authorization": "Bearer k-acme"},
                          timeout=10).json()["steps"]["data"]
        assert [s["evicted_prefix_tokens"] for s in steps] == [None, 0, 256]
        connect(driver, server.base_url, "k-acme")
        driver.get(f"{server.base_url}/ui#/session/acme/s")
        wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 3)
        marked = driver.find_elements(By.CSS_SELECTOR, "#steps td[title*='no longer cached']")
        assert [(cell.text, cell.get_attribute("class")) for cell in marked] == [("0", "miss")]
        assert marked[0].get_attribute("title").startswith("256 tokens the previous step left")
    finally:
        server.stop()


def test_a_session_that_cannot_be_opened_shows_nothing_of_the_last_one(served, driver):
    """A typo or a deleted session: "not found", and no other session's data under its URL."""
    from selenium.webdriver.common.by import By
    base_url, session = served
    connect(driver, base_url, "k-acme")
    wait_for(driver, lambda d: d.find_element(By.LINK_TEXT, session)).click()
    wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 3)
    driver.get(f"{base_url}/ui#/session/acme/no-such-session")   # the same page, another hash
    wait_for(driver, lambda d: "not found" in d.find_element(By.ID, "status").text)
    assert not driver.find_element(By.ID, "session-view").is_displayed()
    assert session not in driver.find_element(By.TAG_NAME, "body").text
    driver.back()   # the session that exists opens again, and the status line is clear
    wait_for(driver, lambda d: d.find_element(By.ID, "session-view").is_displayed())
    assert driver.find_element(By.ID, "session-title").text == f"Session {session}"
    assert len(driver.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 3
    assert driver.find_element(By.ID, "status").text == ""


def test_live_clears_an_error_once_a_refresh_succeeds(served, driver):
    """A Live refresh that failed (a gateway restarting) says so until one succeeds, not for good."""
    from selenium.webdriver.common.by import By
    base_url, session = served
    connect(driver, base_url, "k-acme")
    driver.get(f"{base_url}/ui#/session/acme/{session}")
    wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 3)
    driver.execute_script("""
        window.failures = 1;   // the next API call answers 503, as a restarting gateway would
        const realFetch = window.fetch;
        window.fetch = async (path, init) => {
          if (window.failures > 0 && String(path).startsWith('/v1/traces/sessions/')) {
            window.failures -= 1;
            return new Response(JSON.stringify({detail: 'gateway restarting'}), {status: 503});
          }
          return realFetch(path, init);
        };
        window.statuses = [];   // every text the status line shows, kept (a Live tick is short here)
        new MutationObserver(() => window.statuses.push(document.getElementById('status').textContent))
          .observe(document.getElementById('status'), {childList: true, characterData: true, subtree: true});""")
    driver.find_element(By.ID, "live").click()
    wait_for(driver, lambda d: "gateway restarting" in d.execute_script("return window.statuses"))
    wait_for(driver, lambda d: d.find_element(By.ID, "status").text == "")   # the next refresh worked
    shown = driver.execute_script("return window.statuses")
    assert "" in shown[shown.index("gateway restarting"):]   # said so, then cleared
    assert len(driver.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 3
