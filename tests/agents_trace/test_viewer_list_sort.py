"""/ui's sessions list sorted by a column's header (QA155, QA167), in headless Chromium: both
ways, kept in the URL and through Live, the keyboard's focus kept, rows in place unmoved,
odd sorts falling back to the default order. Split from test_viewer_usability.py (its
store, gateway and connected browser)."""
from __future__ import annotations

from tests.agents_trace.browser import chromium_fixture, wait_for  # noqa: F401 (fixtures)
from tests.agents_trace.helpers import listed_sessions
from tests.agents_trace.test_viewer_usability import (_list, driver_fixture,  # noqa: F401 (fixtures)
                                                     gateway_fixture)


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
