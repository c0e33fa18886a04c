"""The viewer shows what its address names (headless Chromium): another tenant's session
is "not found" even where the caller has one of the same id, the list's download takes
the filters applied (not those typed), long ids wrap on screen, and the cache-hit line
leaves out steps without a prompt as the table does."""
from __future__ import annotations

import pytest

from agents_trace.api import Viewer

from tests.agents_trace.browser import chromium_fixture, connect, page_fixture, wait_for  # noqa: F401 (fixtures)
from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session, served_viewer

KEYS = {"k-acme": Viewer("acme"), "k-globex": Viewer("globex"), "k-admin": Viewer("admin", is_admin=True)}
LONG_ID = "run-" + "0123456789abcdef" * 13   # 212 characters, no place to break


def _step(tracer, clock, tenant: str, session: str, text: str, **result) -> None:
    from agents_trace.records import StepResult
    request_id = f"chatcmpl-{tenant}-{text}"   # each step's text is its own
    ctx = tracer.begin(tenant, {"x-session-id": session},
                       {"model": "tiny", "messages": [{"role": "user", "content": text}]}, request_id=request_id)
    clock.advance(0.5)
    tracer.end(ctx, StepResult(**{"num_output_tokens": 1, "finish_reason": "stop", "output_text": "ok",
                                  "response_id": request_id, **result}))
    clock.advance(1.0)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`shared` in acme (its messages "A-OWN") and in globex ("G-OWN"), a session with a long
    id, and `hits`: prompt, refused (0 prompt tokens), prompt."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path_factory.mktemp("addresses"), clock, capture_content=True)
    _step(tracer, clock, "acme", "shared", "A-OWN", num_input_tokens=10)
    _step(tracer, clock, "globex", "shared", "G-OWN", num_input_tokens=10)
    _step(tracer, clock, "acme", LONG_ID, "long", num_input_tokens=10)
    _step(tracer, clock, "acme", "hits", "one", num_input_tokens=100, num_cached_tokens=50)
    _step(tracer, clock, "acme", "hits", "two", error="context_length_exceeded", error_message="too long")
    _step(tracer, clock, "acme", "hits", "three", num_input_tokens=100, num_cached_tokens=100)
    run_scripted_session(tracer, clock, headers={"x-agent-name": "travel"})
    assert tracer.flush(5.0)
    with served_viewer(tracer, KEYS) as base_url:
        yield base_url


def _connect(driver, base_url: str, key: str) -> None:
    """`connect` as a fresh tab would: no page of the last key's left to click meanwhile."""
    if driver.current_url.startswith(base_url):
        driver.execute_script("sessionStorage.clear()")
    connect(driver, base_url, key)


def _open(driver, base_url: str, hash_: str, rows: int | None = None) -> None:
    from selenium.webdriver.common.by import By
    driver.get(f"{base_url}/ui{hash_}")
    if rows is not None:
        wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == rows
                 and d.find_element(By.ID, "session-view").is_displayed())


def _shown_content(driver) -> str:
    from selenium.webdriver.common.by import By
    driver.find_element(By.CSS_SELECTOR, "button.show-content").click()
    return wait_for(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#steps pre.content").text)


def test_a_link_to_another_tenants_session_is_not_found_even_where_the_viewer_has_one_of_that_id(served, driver):
    from selenium.webdriver.common.by import By
    base_url = served
    connect(driver, base_url, "k-globex")
    _open(driver, base_url, "#/session/acme/shared")   # the link acme would share
    wait_for(driver, lambda d: d.find_element(By.ID, "status").text not in ("", "loading…")
             or d.find_element(By.ID, "session-view").is_displayed())   # an answer, either way
    assert "not found" in driver.find_element(By.ID, "status").text
    assert not driver.find_element(By.ID, "session-view").is_displayed()
    assert "G-OWN" not in driver.find_element(By.TAG_NAME, "body").text
    _open(driver, base_url, "#/session/globex/shared", rows=1)   # its own, by its own link
    assert "G-OWN" in _shown_content(driver)
    _connect(driver, base_url, "k-acme")   # the list's link opens its own session
    wait_for(driver, lambda d: d.find_element(By.LINK_TEXT, "shared")).click()
    wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 1)
    assert "A-OWN" in _shown_content(driver)
    _connect(driver, base_url, "k-admin")   # an admin opens either by its link
    for tenant, text in (("acme", "A-OWN"), ("globex", "G-OWN")):
        _open(driver, base_url, "#/session/admin/shared")
        wait_for(driver, lambda d: "not found" in d.find_element(By.ID, "status").text)
        _open(driver, base_url, f"#/session/{tenant}/shared", rows=1)
        assert driver.find_element(By.ID, "session-title").text == f"Session shared (tenant {tenant})"
        assert text in _shown_content(driver)


def test_a_request_id_link_opens_its_session_for_a_tenant_and_an_admin(served, driver):
    from selenium.webdriver.common.by import By
    base_url = served
    for key in ("k-acme", "k-admin"):
        _connect(driver, base_url, key)
        _open(driver, base_url, "#/?id=chatcmpl-acme-two")   # `hits`' second step
        wait_for(driver, lambda d: [r.text.split()[0] for r in d.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")]
                 == ["hits"])   # the filtered list, not the one connect showed
        wait_for(driver, lambda d: d.find_element(By.LINK_TEXT, "hits").click() or True)
        wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row.found"))
        [found] = driver.find_elements(By.CSS_SELECTOR, "#steps tr.step-row.found")
        assert found.get_attribute("data-step") == "1"


def test_the_lists_download_takes_the_filters_applied_not_those_typed(served, driver):
    from selenium.webdriver.common.by import By
    base_url = served
    connect(driver, base_url, "k-acme")
    wait_for(driver, lambda d: d.find_element(By.LINK_TEXT, "hits"))
    driver.execute_script("""
        window.exported = [];
        const realFetch = window.fetch;
        window.fetch = async (path, init) => {
          if (String(path).startsWith('/v1/traces/export')) window.exported.push(String(path));
          return realFetch(path, init);
        };""")
    driver.find_element(By.ID, "f-agent").send_keys("travel")   # typed, not applied
    driver.find_element(By.ID, "export-all-link").click()
    assert wait_for(driver, lambda d: d.execute_script("return window.exported")) == ["/v1/traces/export?"]
    driver.find_element(By.CSS_SELECTOR, "#filters button[type=submit]").click()   # applied now
    wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#sessions tbody tr")) == 1)
    driver.find_element(By.ID, "f-agent").clear()   # and then cleared, not applied
    driver.find_element(By.ID, "export-all-link").click()
    wait_for(driver, lambda d: len(d.execute_script("return window.exported")) == 2)
    assert driver.execute_script("return window.exported")[1] == "/v1/traces/export?agent_contains=travel"   # part of a name (FI67)


def test_a_long_session_id_wraps_in_the_list_and_the_title_instead_of_leaving_the_screen(served, driver):
    from selenium.webdriver.common.by import By
    base_url = served
    fits = ("const e = document.getElementById(arguments[0]);"
            "return [e.getBoundingClientRect().right, document.documentElement.clientWidth,"
            "        document.documentElement.scrollWidth]")
    connect(driver, base_url, "k-acme")
    wait_for(driver, lambda d: d.find_element(By.LINK_TEXT, LONG_ID))
    right, window, page = driver.execute_script(fits, "sessions")
    assert right <= window and page <= window, (right, window, page)
    _open(driver, base_url, f"#/session/acme/{LONG_ID}", rows=1)
    right, window, page = driver.execute_script(fits, "session-title")
    assert right <= window and page <= window, (right, window, page)
    assert driver.find_element(By.ID, "session-title").text.replace("\n", "") == f"Session {LONG_ID}"


def test_the_cache_hit_line_leaves_out_a_step_without_a_prompt(served, driver):
    base_url = served
    connect(driver, base_url, "k-acme")
    _open(driver, base_url, "#/session/acme/hits", rows=3)
    hit_cells = driver.execute_script(
        "const at = [...document.querySelectorAll('#steps thead th')].findIndex(h => h.textContent === 'Hit');"
        "return [...document.querySelectorAll('#steps tr.step-row')].map(r => r.children[at].textContent)")
    assert hit_cells == ["50%", "—", "100%"]
    # every point the hit line (or a lone dot) draws, as [x, y]; the plot is 160 px tall from y = 10
    points = driver.execute_script("""
        const svg = document.getElementById('context-svg');
        const line = [...svg.querySelectorAll('polyline')].flatMap(
          (p) => p.getAttribute('points').trim().split(/\\s+/).map((xy) => xy.split(',').map(Number)));
        const dots = [...svg.querySelectorAll('circle')].map((c) => [+c.getAttribute('cx'), +c.getAttribute('cy')]);
        return line.concat(dots).sort((a, b) => a[0] - b[0]);""")
    assert [round(y) for _, y in points] == [90, 10]   # 50% and 100%: the refused step has none
    assert not any(abs(y - 170) < 1e-6 for _, y in points)   # nothing at 0%
