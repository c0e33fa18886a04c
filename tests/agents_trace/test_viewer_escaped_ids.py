"""/ui in headless Chromium: ids that differ only in a control character and a backslash
(QA194 F3), the export's file name (F4) and "Load more steps" (F5).

F3: a session `tab<TAB>here` and one `tab\\there` (a backslash and a `t`) both showed as
`tab\\there`, and the text copied named the second. The page's escapes are marked
(`span.esc`), and a session whose id holds escaped characters shows the id to paste
(`tab%09here`, as a reply's x-session-id), which the API and `stepahead traces show` take
as that session alone."""
from __future__ import annotations

import httpx
import pytest

from tests.agents_trace.browser import chromium_fixture, connect, page_fixture, wait_for  # noqa: F401 (fixtures)
from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session, viewer_app
from tests.agents_trace.long_sessions import add_user_turns
from tests.agents_trace.test_viewer_page import KEYS
from tests.gateway.serving import start_server

TAB, BACKSLASH_T = "tab\there", "tab\\there"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path_factory.mktemp("escaped"), clock)
    for session in (TAB, BACKSLASH_T):
        run_scripted_session(tracer, clock, headers={"x-session-id": "tab%09here" if session == TAB else session})
    add_user_turns(tracer, clock, 450, session="long")
    assert tracer.flush(5.0)
    server = start_server(viewer_app(tracer, KEYS))
    yield server.base_url
    server.stop()
    tracer.stop()


LINKS = """
return [...document.querySelectorAll('#sessions tbody a')].map((a) =>
  [a.textContent, [...a.querySelectorAll('span.esc')].map((e) => e.textContent), a.getAttribute('title')]);
"""


def test_the_list_marks_an_escaped_tab_and_not_a_backslash_the_id_holds(served, driver):
    connect(driver, served, "k-acme")
    wait_for(driver, lambda d: len(d.find_elements("css selector", "#sessions tbody a")) == 3)
    rows = [row for row in driver.execute_script(LINKS) if row[0] != "long"]
    assert [text for text, _, _ in rows] == ["tab\\there"] * 2   # the same characters on screen...
    assert sorted((marked, title) for _, marked, title in rows) == [
        ([], None), (["\\t"], "id to paste (stepahead traces show, a link): tab%09here")]   # ...told apart


@pytest.mark.parametrize(("session", "path", "pastable"), [(TAB, "tab%2509here", "tab%09here"),
                                                           (BACKSLASH_T, "tab%5Cthere", None)])
def test_a_session_shows_the_id_to_paste_where_its_id_holds_escapes(served, driver, session, path, pastable):
    connect(driver, served, "k-acme")
    driver.get(f"{served}/ui#/session/acme/{path}")
    wait_for(driver, lambda d: len(d.find_elements("css selector", "#steps tr.step-row")) == 3)
    title = driver.find_element("id", "session-title")
    assert title.text == "Session tab\\there"
    marks = [e.text for e in title.find_elements("css selector", "span.esc")]
    assert marks == (["\\t"] if session == TAB else [])
    paste = driver.find_element("id", "session-paste")
    assert paste.is_displayed() == (pastable is not None)
    if pastable:
        assert driver.find_element("id", "session-pastable").text == pastable
        # the text to paste names this session, not the one whose id is the text shown
        answer = httpx.get(f"{served}/v1/traces/sessions/{pastable.replace('%', '%25')}",
                           headers={"authorization": "Bearer k-acme"}).json()
        assert answer["session"]["session"] == TAB


def test_the_download_takes_the_gateways_file_name(served, driver):
    connect(driver, served, "k-acme")
    names = driver.execute_script("""return [
      dispositionName(`attachment; filename="uni__c__ode.jsonl"; filename*=UTF-8''%C3%BCn%C3%AF%20%22%C3%A7%22.jsonl`),
      dispositionName('attachment; filename="run-1.jsonl"'), dispositionName(null),
      dispositionName("attachment; filename=\\"a.jsonl\\"; filename*=UTF-8''%FF.jsonl")];""")
    assert names == ['ünï "ç".jsonl', "run-1.jsonl", None, "a.jsonl"]


def test_load_more_steps_adds_rows_and_keeps_those_shown(served, driver):
    connect(driver, served, "k-acme")
    driver.get(f"{served}/ui#/session/acme/long")
    wait_for(driver, lambda d: len(d.find_elements("css selector", "#steps tr.step-row")) == 200)
    driver.execute_script("window.firstRow = document.querySelector('#steps tr.step-row');")
    for shown in (400, 450):
        driver.find_element("id", "more-steps").click()
        wait_for(driver, lambda d, n=shown: len(d.find_elements("css selector", "#steps tr.step-row")) == n)
    same, indexes = driver.execute_script("""return [document.querySelector('#steps tr.step-row') === window.firstRow,
      [...document.querySelectorAll('#steps tr.step-row')].map((r) => Number(r.dataset.step))];""")
    assert same   # the rows shown were kept, not made again
    assert indexes == list(range(450))
    assert not driver.find_element("id", "more-steps").is_displayed()


def test_the_id_to_paste_is_the_x_session_id_the_gateway_sends(served, driver):
    """`pastableId` (dom.js) writes what header_ids' `encode_header_id` writes, for an id
    with an escaped character; an id shown as it is needs none (null)."""
    from agents_trace.header_ids import decode_header_id, encode_header_id
    connect(driver, served, "k-acme")
    ids = ["tab\there", "a%41\u202e é/ü", "cr\r\nlf\x00", "\x1b[31mred", "plain é %41", "tab\\there"]
    got = driver.execute_script("return arguments[0].map(pastableId);", ids)
    assert got == [encode_header_id(i) for i in ids[:4]] + [None, None]
    assert [decode_header_id(text) for text in got[:4]] == ids[:4]


def test_the_page_escapes_what_the_command_line_escapes(served, driver):
    """QA205 F1: `dup\\u200b-id` and `dup-id\\u2060` showed as `dup-id` (zero-width and
    other invisible characters were not escaped): `visible` (dom.js) now escapes exactly what
    `stepahead traces` does (`text_table.printable`, Python's `isprintable`), and such an id
    has an id to paste."""
    from agents_trace.header_ids import encode_header_id
    from agents_trace.text_table import printable, terminal_json
    connect(driver, served, "k-acme")
    ids = ["dup-id", "dup\u200b-id", "dup-id\u2060", "\ufeffbom", "nb\xa0sp", "soft\xadhyphen", "tag\U000e0001",
           "private\ue000use", "bidi\u202eevil", "tab\there", "emoji 😀 é ü 漢字", "line\u2028sep"]
    shown, pasted, json_shown = driver.execute_script(
        "return [arguments[0].map(visible), arguments[0].map(pastableId),"
        " arguments[0].map((i) => jsonVisible(JSON.stringify(i)))];", ids)
    assert shown == [printable(i) for i in ids]
    assert pasted == [None if i.isprintable() else encode_header_id(i) for i in ids]
    assert json_shown == [terminal_json(i) for i in ids]   # content: the same JSON as `traces show --json`
