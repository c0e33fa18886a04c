"""The /ui list's address in headless Chromium: its filters, the rows "Load more" loaded
and the scroll are kept through Back, a reload and a shared link. Split from
test_viewer_page.py."""
from __future__ import annotations

from tests.agents_trace.browser import chromium_fixture, connect, page_fixture, wait_for  # noqa: F401 (fixtures)
from tests.agents_trace.helpers import ManualClock, make_tracer, viewer_app
from tests.agents_trace.test_viewer_page import KEYS
from tests.gateway.serving import start_server


def test_back_reload_and_a_shared_link_keep_the_lists_filters_rows_and_scroll(tmp_path, driver):
    """120 sessions of agent "bulk" (and 5 of another): filtered, 100 rows loaded, one far
    down opened; Back, a reload and the URL opened in another tab show that same list."""
    from selenium.webdriver.common.by import By

    from agents_trace.records import StepResult

    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    for i in range(125):
        ctx = tracer.begin("acme", {"x-session-id": f"s{i:03d}", "x-agent-name": "other" if i % 25 == 0 else "bulk"},
                           {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
        clock.advance(0.1)
        tracer.end(ctx, StepResult(num_input_tokens=5, num_output_tokens=1, finish_reason="stop", output_text="ok"))
        clock.advance(1.0)
    assert tracer.flush(5.0)
    server = start_server(viewer_app(tracer, KEYS))

    def rows(d) -> list[str]:
        return d.execute_script("return [...document.querySelectorAll('#sessions tbody tr')].map(r => r.innerText)")

    def agents_shown(d) -> set[str]:
        return {row.split("\t")[1] for row in rows(d)}

    try:
        connect(driver, server.base_url, "k-acme")
        wait_for(driver, lambda d: len(rows(d)) == 50)
        driver.find_element(By.ID, "f-agent").send_keys("bulk")
        driver.find_element(By.CSS_SELECTOR, "#filters button[type=submit]").click()
        wait_for(driver, lambda d: d.current_url.endswith("/ui#/?agent=bulk") and agents_shown(d) == {"bulk"})
        driver.find_element(By.ID, "more-sessions").click()
        wait_for(driver, lambda d: len(rows(d)) == 100)
        assert driver.current_url.endswith("/ui#/?agent=bulk&rows=100")
        link = driver.find_elements(By.CSS_SELECTOR, "#sessions tbody a")[90]   # only after "Load more"
        name = link.text
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", link)
        scrolled = driver.execute_script("return scrollY")
        assert scrolled > 500
        link.click()
        wait_for(driver, lambda d: d.find_element(By.ID, "session-title").text == f"Session {name}")
        driver.back()
        wait_for(driver, lambda d: len(rows(d)) == 100 and abs(d.execute_script("return scrollY") - scrolled) < 2)
        assert driver.find_element(By.ID, "f-agent").get_attribute("value") == "bulk"
        assert agents_shown(driver) == {"bulk"} and name in [row.split("\t")[0] for row in rows(driver)]
        driver.refresh()
        wait_for(driver, lambda d: len(rows(d)) == 100 and agents_shown(d) == {"bulk"})
        assert driver.find_element(By.ID, "f-agent").get_attribute("value") == "bulk"
        driver.execute_script("sessionStorage.clear()")   # as in a tab the link was pasted into
        driver.refresh()
        wait_for(driver, lambda d: "Enter an API key" in d.find_element(By.ID, "status").text)
        driver.find_element(By.ID, "api-key").send_keys("k-acme")
        driver.find_element(By.ID, "connect").click()
        wait_for(driver, lambda d: len(rows(d)) == 100 and agents_shown(d) == {"bulk"})
        assert driver.current_url.endswith("/ui#/?agent=bulk&rows=100")
    finally:
        server.stop()
        tracer.stop()
