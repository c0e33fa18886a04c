"""/ui's smaller usability points (QA155's notes, FI67): the id and agent filters both take
part of the text in any case (in the API too) and the window's line says when it counts
every session, tracing off is said, the keyboard's focus follows a session opened from
the list and back, and a key no header can carry is said to be invalid. One store, gateway and browser for the module (the browser tests are
the suite's slowest), the browser as a new one for each test; the column sort is
test_viewer_list_sort.py, the context chart's refused prompts test_viewer_context_chart.py
(each with a gateway and browser of its own from this module's fixtures)."""
from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI, HTTPException, Request

from agents_trace.api import Viewer, build_trace_router
from agents_trace.records import StepResult
from tests.agents_trace.browser import chromium_fixture, connect, fresh_page, wait_for  # noqa: F401 (fixtures)
from tests.agents_trace.helpers import ManualClock, listed_sessions, make_tracer
from tests.gateway.serving import start_server

KEYS = {"k-acme": Viewer("acme")}
# (session, agent, steps): the list, most recently active first, is the reverse
SESSIONS = (("Run-Alpha", "Planner", 3), ("beta-run", "writer", 1), ("gamma", "planner-two", 2))


def _step(tracer, clock, session: str, agent: str, result: StepResult) -> None:
    ctx = tracer.begin("acme", {"x-session-id": session, "x-agent-name": agent},
                       {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
    clock.advance(0.2)
    tracer.end(ctx, result)
    clock.advance(1.0)


def _served(tokens: int = 10) -> StepResult:
    return StepResult(num_input_tokens=tokens, num_cached_tokens=tokens // 2, num_output_tokens=2, ttft_s=0.05,
                      worker="w0", finish_reason="stop", output_text="ok")


@pytest.fixture(name="gateway", scope="module")
def gateway_fixture(tmp_path_factory):
    """(base URL, tracing flag the app reads, add-a-step, API client): SESSIONS' steps; "gamma"
    ends with a refused 100,019-token prompt after a served 7,019-token one."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path_factory.mktemp("usability"), clock)
    for session, agent, steps in SESSIONS:
        for n in range(steps):
            last_of_gamma = session == "gamma" and n == steps - 1
            _step(tracer, clock, session, agent, StepResult(num_input_tokens=100_019, error="context_length_exceeded",
                                                            error_message="too long")
                  if last_of_gamma else _served(7_019 if session == "gamma" else 10))
    assert tracer.flush(5.0)
    flags = {"tracing": True}

    def viewer(request: Request) -> Viewer:
        found = KEYS.get((request.headers.get("authorization") or "").removeprefix("Bearer ").strip())
        if found is None:
            raise HTTPException(401, "Invalid API key.")
        return found

    app = FastAPI()
    app.include_router(build_trace_router(viewer=viewer, store_path=lambda _r: tracer.store_path,
                                          tracing=lambda _r: flags["tracing"]))
    server = start_server(app)

    def add(session: str, agent: str) -> None:
        _step(tracer, clock, session, agent, _served())
        assert tracer.flush(5.0)
    with httpx.Client(base_url=server.base_url, headers={"Authorization": "Bearer k-acme"}) as client:
        yield server.base_url, flags, add, client
    server.stop()
    tracer.stop()


@pytest.fixture(name="driver")
def driver_fixture(chromium, gateway):
    """The module's browser as a new one (`fresh_page`), connected with acme's key."""
    with fresh_page(chromium) as page:
        connect(page, gateway[0], "k-acme")
        yield page


def _found(client, query: str) -> list[str]:
    return sorted(s["session"] for s in client.get("/v1/traces/sessions?" + query).json()["data"])


# --- the API: filters (no browser) ---------------------------------------------------

def test_the_id_filter_takes_part_of_an_id_in_any_case(gateway):
    client = gateway[3]
    assert _found(client, "id_contains=RUN") == ["Run-Alpha", "beta-run"]
    assert _found(client, "id_contains=alpha") == ["Run-Alpha"]
    assert _found(client, "id_contains=%25") == []   # literal text, no wildcard


def test_the_agent_filter_takes_part_of_a_name_in_any_case_and_agent_stays_exact(gateway):
    client = gateway[3]
    assert _found(client, "agent_contains=plan") == ["Run-Alpha", "gamma"]
    assert _found(client, "agent_contains=WRIT") == ["beta-run"]
    assert _found(client, "agent_contains=_") == []
    assert _found(client, "agent=plan") == []   # `agent` is a whole name, as `traces list --agent`
    stats = client.get("/v1/traces/stats?agent_contains=PLANNER").json()["total"]
    assert (stats["sessions"], stats["steps"]) == (2, 5)   # the window's line follows the list's agent filter
    export = client.get("/v1/traces/export?agent_contains=writ").text
    assert "1 session" in export.splitlines()[0]


def test_me_says_whether_tracing_is_on(gateway):
    _, flags, _, client = gateway
    assert client.get("/v1/traces/me").json() == {"tenant": "acme", "is_admin": False, "tracing": True}
    flags["tracing"] = False
    try:
        assert client.get("/v1/traces/me").json()["tracing"] is False
    finally:
        flags["tracing"] = True


# --- the page ---------------------------------------------------------------------------

def _list(driver, base_url: str, query: str = "") -> list[str]:
    driver.get(f"{base_url}/ui#/{query}")
    driver.refresh()   # the hash alone changes nothing on a page already there
    wait_for(driver, lambda d: d.find_elements("css selector", "#sessions tbody tr") or
             d.find_element("id", "status").text.startswith("No sessions"))
    return listed_sessions(driver)


def test_the_filters_say_how_they_match_and_the_window_line_what_it_counts(gateway, driver):
    base_url = gateway[0]
    assert _list(driver, base_url, "?agent=PLAN") == ["gamma", "Run-Alpha"]
    assert driver.find_element("id", "f-agent").get_attribute("placeholder") == "part of a name"
    assert driver.find_element("id", "f-id").get_attribute("placeholder").startswith("part of an id")
    for field in ("f-id", "f-agent"):   # the store folds ASCII letters only: the tooltips say so (QA167 #7)
        title = driver.find_element("id", field).find_element("xpath", "..").get_attribute("title")
        assert "in any case of the letters A to Z" in title and "É and é" in title
    stats = wait_for(driver, lambda d: d.find_element("id", "window-stats").text)
    assert stats.startswith("Steps in this window: ") and "in 2 sessions" in stats
    assert _list(driver, base_url, "?id=alpha") == ["Run-Alpha"]
    assert _list(driver, base_url, "?id=nothing-has-this") == []
    assert driver.find_element("id", "status").text == "No sessions match."
    stats = wait_for(driver, lambda d: d.find_element("id", "window-stats").text)
    assert stats.startswith("Steps in this window (all sessions): ")


def test_tracing_off_says_so_over_the_page(gateway, driver):
    base_url, flags = gateway[0], gateway[1]
    assert not driver.find_element("id", "tracing-off").is_displayed()
    flags["tracing"] = False
    try:
        connect(driver, base_url, "k-acme")
        banner = wait_for(driver, lambda d: d.find_element("id", "tracing-off").is_displayed() and
                          d.find_element("id", "tracing-off"))
        assert banner.text == "Tracing is off: new requests are not recorded; showing what the store holds."
    finally:
        flags["tracing"] = True
        connect(driver, base_url, "k-acme")
    wait_for(driver, lambda d: not d.find_element("id", "tracing-off").is_displayed())


def test_focus_moves_to_the_session_heading_and_back_to_its_link(gateway, driver):
    from selenium.webdriver.common.keys import Keys
    base_url = gateway[0]
    _list(driver, base_url)
    link = driver.find_element("link text", "gamma")
    driver.execute_script("arguments[0].focus()", link)
    link.send_keys(Keys.ENTER)
    wait_for(driver, lambda d: d.find_element("id", "session-title").is_displayed() and
             d.execute_script("return document.activeElement.id") == "session-title")
    driver.back()
    wait_for(driver, lambda d: d.execute_script(
        "const a = document.activeElement; return a.tagName === 'A' && a.textContent === 'gamma'"))


def test_a_key_no_header_can_carry_is_an_invalid_key_and_never_sent(gateway, driver):
    """QA205 F5: a key with a letter past Latin-1 made fetch throw, and its raw message
    ("non ISO-8859-1 code point") showed; the tenant of the key before stayed shown."""
    asked = "return performance.getEntriesByType('resource').filter((e) => e.name.includes('/v1/')).length"
    before = driver.execute_script(asked)
    driver.find_element("id", "api-key").send_keys("sk-\u043a\u043b\u044e\u0447")   # sk-ключ
    driver.find_element("id", "connect").click()
    status = wait_for(driver, lambda d: d.find_element("id", "status").text not in ("", "loading…") and
                      d.find_element("id", "status").text)
    assert status == 'Invalid API key provided: it holds "\u043a", which no API key has (not sent).'
    assert driver.find_element("id", "who").text == ""   # forgotten, as after a 401
    assert not driver.find_element("id", "sessions-view").is_displayed()
    assert driver.execute_script(asked) == before


def test_the_gateway_says_tracing_is_off_when_it_has_no_tracer():
    from types import SimpleNamespace

    from gateway.tracing import _is_tracing
    request = lambda tracer: SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(  # noqa: E731
        gateway=SimpleNamespace(tracer=tracer))))
    assert _is_tracing(request(None)) is False and _is_tracing(request(object())) is True
