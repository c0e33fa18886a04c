"""/ui in headless Chromium with text a client chose: a session id holding a slash and
odd characters opens, reloads and exports; ids, names, errors and content with bidi and
control characters are shown escaped as the CLI prints them. Split from
test_viewer_page.py."""
from __future__ import annotations

import json
from urllib.parse import quote

import httpx

from tests.agents_trace.browser import chromium_fixture, connect, page_fixture, wait_for  # noqa: F401 (fixtures)
from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session, tool_call_message, viewer_app
from tests.agents_trace.test_viewer_page import KEYS
from tests.gateway.serving import start_server


def test_viewer_opens_and_exports_a_session_whose_id_holds_a_slash_and_odd_characters(tmp_path, driver):
    from selenium.webdriver.common.by import By
    session = "proj/run 1?#%ü"
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    run_scripted_session(tracer, clock, headers={"x-session-id": session})
    assert tracer.flush(5.0)
    server = start_server(viewer_app(tracer, KEYS))
    try:
        connect(driver, server.base_url, "k-acme")
        wait_for(driver, lambda d: d.find_element(By.LINK_TEXT, session)).click()
        wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 3)
        driver.find_elements(By.CSS_SELECTOR, "button.show-content")[1].click()
        wait_for(driver, lambda d: "result of get_weather" in d.find_element(By.ID, "steps").text)
        driver.execute_script("""
            window.exported = [];
            const realFetch = window.fetch;
            window.fetch = async (path, init) => {
              const response = await realFetch(path, init);
              if (String(path).includes('/export')) {
                window.exported.push([String(path), response.status, await response.clone().text()]);
              }
              return response;
            };""")
        driver.find_element(By.ID, "export-link").click()
        path, status, text = wait_for(driver, lambda d: (d.execute_script("return window.exported") or [None])[0])
        driver.refresh()   # the page's own URL (#/session/acme/...) opens it again
        wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 3)
        assert "not found" not in driver.find_element(By.ID, "status").text
    finally:
        server.stop()
        tracer.stop()
    assert path == "/v1/traces/sessions/proj%2Frun%201%3F%23%25%C3%BC/export?tenant=acme" and status == 200
    header, *requests = text.splitlines()
    assert header.startswith('{"format":"stepahead-trace/1"') and len(requests) == 3


BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def test_viewer_shows_bidi_and_control_characters_escaped_as_the_cli_does(tmp_path, driver):
    """Ids, names, errors and content a client sent with U+202E and the like: never shown raw
    (`invoice_\\u202etxt.exe` would read backwards), always as the CLI's escapes."""
    from selenium.webdriver.common.by import By

    from agents_trace.records import StepResult, ToolCall
    from agents_trace.text_table import printable

    session, agent, tool = "inv\u202eoice\t1", "ag\u2067ent", "ls\u202e"
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    headers = {"x-session-id": session, "x-agent-name": agent}
    messages = [{"role": "user", "content": "list " + BIDI}]
    ctx = tracer.begin("acme", headers, {"model": "tiny", "messages": list(messages)})
    clock.advance(0.5)
    tracer.end(ctx, StepResult(num_input_tokens=10, num_output_tokens=2, finish_reason="tool_calls",
                               tool_calls=(ToolCall("call_1", tool, "{}"),)))
    clock.advance(1.0)
    messages += [tool_call_message("call_1", tool), {"role": "tool", "tool_call_id": "call_1",
                                                     "content": "invoice_\u202etxt.exe approved=false"}]
    ctx = tracer.begin("acme", headers, {"model": "tiny", "messages": list(messages)})
    clock.advance(0.5)
    tracer.end(ctx, StepResult(error="upstream_error", error_message="bad \u202e\x1b[31m answer"))
    assert tracer.flush(5.0)
    server = start_server(viewer_app(tracer, KEYS))
    hidden = "return [document.body.textContent, ...[...document.querySelectorAll('[title]')].map(e => e.title)]"
    try:
        content = httpx.get(f"{server.base_url}/v1/traces/sessions/{quote(session, safe='')}/steps/1/content",
                            headers={"authorization": "Bearer k-acme"}, timeout=10).json()
        connect(driver, server.base_url, "k-acme")
        wait_for(driver, lambda d: d.find_element(By.LINK_TEXT, printable(session))).click()
        wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#steps tr.step-row")) == 2)
        assert driver.find_element(By.ID, "session-title").text == "Session inv\\u202eoice\\t1"
        assert driver.find_element(By.ID, "session-summary").text.startswith("agent ag\\u2067ent · ")
        steps_text = driver.find_element(By.ID, "steps").text
        assert "tool:ls\\u202e" in steps_text and "upstream_error: bad \\u202e\\x1b[31m answer" in steps_text
        assert "tool:ls\\u202e" in driver.find_element(By.ID, "gantt").text
        driver.find_elements(By.CSS_SELECTOR, "button.show-content")[1].click()
        pre = wait_for(driver, lambda d: d.find_element(By.CSS_SELECTOR, "pre.content"))
        assert '"content": "invoice_\\u202etxt.exe approved=false"' in pre.text
        assert json.loads(pre.text) == content   # still the JSON the API sent
        for text in driver.execute_script(hidden):
            assert not set(text) & set(BIDI + "\x1b"), text
        driver.find_element(By.ID, "brand").click()   # the list: the id and the agent escaped too
        assert wait_for(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#sessions tbody tr").text.startswith(
            "inv\\u202eoice\\t1 ag\\u2067ent "))
        for text in driver.execute_script(hidden):
            assert not set(text) & set(BIDI + "\x1b"), text
    finally:
        server.stop()
        tracer.stop()
