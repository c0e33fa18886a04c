"""/ui's smaller usability points (QA155's notes, FI67): the sessions list sorts by a
column's header (kept in the URL and through Live), the id and agent filters both take
part of the text in any case (in the API too) and the window's line says when it counts
every session, a refused prompt does not squash the context chart, tracing off is said,
and the keyboard's focus follows a session opened from the list and back. One store,
gateway and browser for the module (the browser tests are the suite's slowest), the
browser as a new one for each test."""
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


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
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


@pytest.fixture
def driver(chromium, gateway):
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


def _header(driver, column: str):
    return driver.find_element("css selector", f'#sessions thead button[data-sort="{column}"]')


def test_a_header_sorts_the_list_both_ways_kept_in_the_url_and_through_live(gateway, driver):
    base_url, _, add, _ = gateway
    assert _list(driver, base_url) == ["gamma", "beta-run", "Run-Alpha"]   # most recently active first
    last = _header(driver, "last").find_element("xpath", "..")
    assert last.get_attribute("aria-sort") == "descending"
    _header(driver, "steps").click()
    assert listed_sessions(driver) == ["Run-Alpha", "gamma", "beta-run"]   # most steps first
    th = _header(driver, "steps").find_element("xpath", "..")
    assert th.get_attribute("aria-sort") == "descending" and last.get_attribute("aria-sort") is None
    # the arrow is aria-hidden: the header's name is its words, aria-sort the order (QA167 #6)
    assert _header(driver, "steps").accessible_name == "Steps"
    arrow = _header(driver, "steps").find_element("css selector", ".arrow")
    assert driver.execute_script("return getComputedStyle(arguments[0], '::after').content", arrow) == '" ▼"'
    assert arrow.get_attribute("aria-hidden") == "true"
    assert "sort=-steps" in driver.current_url
    _header(driver, "steps").click()
    assert listed_sessions(driver) == ["beta-run", "gamma", "Run-Alpha"] and "sort=steps" in driver.current_url
    assert th.get_attribute("aria-sort") == "ascending"
    note = driver.find_element("id", "sort-note").text
    # every session is listed ("Load more" hidden): the note promises no more (QA167 #8)
    assert note == "Sorted by Steps (ascending) among the 3 sessions listed.", note
    _header(driver, "session").click()   # text: A to Z first, as people read it
    assert listed_sessions(driver) == ["beta-run", "gamma", "Run-Alpha"] and "sort=session" in driver.current_url
    _header(driver, "steps").click()
    add("beta-run", "writer")   # now 2 steps: active again, on top in the API's order
    add("beta-run", "writer")
    driver.execute_async_script("refreshList().then(arguments[0])")   # what Live does every 2 s
    assert listed_sessions(driver) == ["beta-run", "Run-Alpha", "gamma"]   # 3, 3 (a tie: the API's order), 2
    assert _list(driver, base_url, "?sort=-steps") == ["beta-run", "Run-Alpha", "gamma"]   # a reload keeps it
    driver.find_element("id", "f-agent").send_keys("a")
    driver.find_element("css selector", "#filters button[type=submit]").click()   # Apply keeps the sort
    wait_for(driver, lambda d: "agent=a" in d.current_url)
    assert "sort=-steps" in driver.current_url


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


def test_a_refused_prompt_is_drawn_apart_and_leaves_the_served_scale(gateway, driver):
    base_url = gateway[0]
    driver.get(f"{base_url}/ui#/session/acme/gamma")
    bars = wait_for(driver, lambda d: d.execute_script(
        "const svg = document.getElementById('context-svg'); if (!svg) return null;"
        "const box = (r) => ({ h: r.getBBox().height, fill: r.getAttribute('fill') });"
        "return { served: [...svg.querySelectorAll('.prompt-bar')].map(box),"
        " refused: [...svg.querySelectorAll('.refused-bar')].map(box),"
        " labels: [...svg.querySelectorAll('.refused-label')].map((t) => t.textContent) }"))
    assert len(bars["served"]) == 1 and len(bars["refused"]) == 1
    assert bars["served"][0]["h"] == pytest.approx(160)   # the served prompt keeps the whole height
    assert bars["refused"][0]["h"] == pytest.approx(160) and bars["refused"][0]["fill"] == "url(#refused-hatch)"
    assert bars["labels"] == ["refused: 100,019 tokens"]


# steps as /v1/traces/sessions/{id}/steps gives them: a served prompt, then refused ones of
# which two were refused before their prompt was counted (0 tokens): past the context (the
# gateway's bound is in its message) and by the tenant's rate
_STEP = {"num_cached_tokens": 0, "num_output_tokens": 0, "error": None, "error_message": None}
_CHART_STEPS = [
    {**_STEP, "index": 0, "num_input_tokens": 7_019, "num_cached_tokens": 7_000, "num_output_tokens": 5},
    {**_STEP, "index": 1, "num_input_tokens": 0, "error": "context_length_exceeded",
     "error_message": "This model's maximum context length is 8192 tokens. However, you requested at least "
                      "15391 tokens (at least 15389 in the messages, 2 in the completion)."},
    {**_STEP, "index": 2, "num_input_tokens": 100_019, "error": "context_length_exceeded"},
    {**_STEP, "index": 3, "num_input_tokens": 250_000, "error": "context_length_exceeded"},
    {**_STEP, "index": 4, "num_input_tokens": 99_999_999, "error": "context_length_exceeded"},
    {**_STEP, "index": 5, "num_input_tokens": 3_000, "error": "context_length_exceeded"},
    {**_STEP, "index": 6, "num_input_tokens": 0, "error": "rate_limit_exceeded"},
]


def test_a_prompt_refused_before_it_was_counted_is_drawn_and_every_capped_bar_is_marked(gateway, driver):
    """QA167 #2 and #4: a context refusal stored with 0 prompt tokens was an invisible bar
    titled "prompt 0 tok"; a capped bar whose mark would overlap the one before had none."""
    base_url = gateway[0]
    if "session/acme/gamma" not in driver.current_url:
        driver.get(f"{base_url}/ui#/session/acme/gamma")
        wait_for(driver, lambda d: d.find_elements("id", "context-svg"))
    chart = driver.execute_script(
        "renderContextChart(arguments[0]); const svg = document.getElementById('context-svg');"
        "const box = (n) => { const b = n.getBBox(); return { x: b.x, y: b.y, w: b.width, h: b.height }; };"
        "return { bars: [...svg.querySelectorAll('rect[class]')].map((r) => ({ ...box(r), cls: r.getAttribute('class'),"
        "  title: r.querySelector('title').textContent })),"
        " caps: svg.querySelectorAll('.refused-cap').length,"
        " labels: [...svg.querySelectorAll('.refused-label')].map((t) => ({ ...box(t), text: t.textContent })) }",
        _CHART_STEPS)
    bars = chart["bars"]
    uncounted = bars[1]   # past the context, size not counted: drawn whole, capped, and said so
    assert uncounted["h"] == pytest.approx(160) and uncounted["h"] == pytest.approx(bars[0]["h"])
    assert "before its prompt was counted" in uncounted["title"] and "at least 15389" in uncounted["title"]
    assert "0 tok" not in uncounted["title"]
    assert [b["cls"] for b in bars] == ["prompt-bar", "refused-bar uncounted"] + ["refused-bar"] * 4 + \
        ["refused-bar uncounted"]
    assert 0 < bars[6]["h"] < 20 and "size unknown" in bars[6]["title"]   # a rate refusal: a short mark
    assert bars[5]["h"] < 160   # smaller than the served prompt: to scale
    # four capped bars side by side (40 px apart): each keeps a mark, none over another
    assert chart["caps"] == 4 and len(chart["labels"]) == 4
    texts = [label["text"] for label in chart["labels"]]
    assert texts[0] in ("refused (not counted)", "not counted") and any("100,019" in t or "100K" in t for t in texts)
    assert any("250" in t for t in texts) and any("99,999,999" in t or "99.9M" in t for t in texts)
    for i, a in enumerate(chart["labels"]):
        for b in chart["labels"][i + 1:]:
            apart = a["x"] + a["w"] <= b["x"] or b["x"] + b["w"] <= a["x"] or \
                a["y"] + a["h"] <= b["y"] or b["y"] + b["h"] <= a["y"]
            assert apart, (a, b)


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


_ACTIVE = "const a = document.activeElement; return a.tagName + ' ' + a.textContent"


def test_live_keeps_the_focus_and_moves_no_row_already_in_place_and_odd_sorts_fall_back(gateway, driver):
    """QA167 #1, #3, #5, #8: a Live refresh took the keyboard's focus off the list (every
    row moved); `sort=constructor` emptied it; a sort moved every row even in order; a
    non-admin's `sort=tenant` sorted by a hidden column; the note promised more rows."""
    base_url, _, add, _ = gateway
    for query in ("?sort=-steps", ""):
        _list(driver, base_url, query)
        link = driver.find_element("link text", "Run-Alpha")
        driver.execute_script("arguments[0].focus()", link)
        driver.execute_async_script("refreshList().then(arguments[0])")   # what Live does every 2 s
        assert driver.execute_script(_ACTIVE) == "A Run-Alpha", query
    add("Run-Alpha", "Planner")   # active again: its row is rebuilt on top, its link focused again
    driver.execute_async_script("refreshList().then(arguments[0])")
    assert listed_sessions(driver)[0] == "Run-Alpha" and driver.execute_script(_ACTIVE) == "A Run-Alpha"
    # rows in order: sortRows moves none
    moved = driver.execute_script(
        "const body = document.querySelector('#sessions tbody'); const seen = [];"
        "const watch = new MutationObserver((records) => seen.push(...records)); watch.observe(body, { childList: true });"
        "sortRows(); seen.push(...watch.takeRecords()); watch.disconnect(); return seen.length")
    assert moved == 0
    # unknown, inherited and hidden columns: the default order, no error
    for raw in ("constructor", "-toString", "__proto__", "-hasOwnProperty", "tenant"):   # tenant: admin's only
        assert driver.execute_script("return listSort(new URLSearchParams(arguments[0]))", "sort=" + raw) == \
            {"column": "last", "descending": True}, raw
    assert _list(driver, base_url, "?sort=constructor") == listed_sessions(driver) != []
    assert driver.find_element("id", "status").text == "" and driver.find_element("id", "sort-note").text == ""
    _list(driver, base_url, "?sort=tenant")
    assert driver.find_element("id", "sort-note").text == ""
    note = driver.execute_script("history.replaceState(null, '', '#/?sort=session');"
                                 "document.getElementById('more-sessions').hidden = false; sortRows();"
                                 "return document.getElementById('sort-note').textContent")
    assert note.endswith('listed ("Load more sessions" adds more, sorted in).')


def test_rows_out_of_place_move_fewest_first(gateway, driver):
    """QA167 #5: of 300 rows shuffled, only those off the longest run already in order move."""
    import random
    rng = random.Random(7)
    order = list(range(300))
    rng.shuffle(order)
    moves, result = driver.execute_script(
        "const body = document.createElement('tbody');"
        "for (const n of arguments[0]) { const row = body.insertRow(); row.dataset.n = n; }"
        "const target = [...body.rows].sort((a, b) => a.dataset.n - b.dataset.n); let moves = 0;"
        "const insert = body.insertBefore.bind(body); body.insertBefore = (a, b) => { moves++; return insert(a, b); };"
        "moveInto(body, target); return [moves, [...body.rows].map((r) => Number(r.dataset.n))]", order)
    assert result == sorted(order)
    tails: list[int] = []   # the longest increasing run's length, for the fewest moves
    import bisect
    for n in order:
        at = bisect.bisect_left(tails, n)
        tails[at:at + 1] = [n]
    assert moves == len(order) - len(tails)


def test_the_gateway_says_tracing_is_off_when_it_has_no_tracer():
    from types import SimpleNamespace

    from gateway.tracing import _is_tracing
    request = lambda tracer: SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(  # noqa: E731
        gateway=SimpleNamespace(tracer=tracer))))
    assert _is_tracing(request(None)) is False and _is_tracing(request(object())) is True
