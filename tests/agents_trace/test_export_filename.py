"""A session export's file name (`Content-Disposition`, QA194 F4): the id whole in
`filename*` (RFC 5987), an ASCII stand-in in `filename`, `.jsonl` once, and a header that
is printable ASCII whatever the id."""
from __future__ import annotations

from urllib.parse import quote, unquote

import httpx
import pytest

from agents_trace.export_filename import ascii_file_name, export_disposition, unicode_file_name
from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session, viewer_app
from tests.agents_trace.test_api import KEYS

ODD_IDS = ['ünï "ç" ódé.jsonl', "crlf\r\nSet-Cookie: evil=1", 'quote"; filename="evil.sh', "nul\x00byte",
           "back\\slash", "..", "x/export", "inv\u202eoice.exe", "a%41", "日本語", "tab\there", "x" * 300]


@pytest.mark.parametrize(("session", "header"), [
    ("run-1", 'attachment; filename="run-1.jsonl"'),   # as before: nothing to add
    ('ünï "ç" ódé.jsonl', "attachment; filename=\"uni__c__ode.jsonl\"; "
                          "filename*=UTF-8''%C3%BCn%C3%AF%20%22%C3%A7%22%20%C3%B3d%C3%A9.jsonl"),
    ("run.JSONL", 'attachment; filename="run.jsonl"'),
    ("日本語", "attachment; filename=\"___.jsonl\"; filename*=UTF-8''%E6%97%A5%E6%9C%AC%E8%AA%9E.jsonl"),
    ("a%41", "attachment; filename=\"a_41.jsonl\"; filename*=UTF-8''a%2541.jsonl"),
    ("inv\u202eoice", 'attachment; filename="inv_oice.jsonl"'),   # never a name that reads backwards
    ("x/../y", 'attachment; filename="x_.._y.jsonl"'),
    ("..", 'attachment; filename="session.jsonl"'),
])
def test_known_answers(session, header):
    assert export_disposition(session) == header


@pytest.mark.parametrize("session", ODD_IDS)
def test_the_header_is_printable_ascii_and_names_one_jsonl_file(session):
    header = export_disposition(session)
    assert header.isascii() and header.isprintable(), header
    fallback, name = ascii_file_name(session), unicode_file_name(session)
    for file_name in (fallback, name):
        assert file_name.endswith(".jsonl") and not file_name.lower().endswith(".jsonl.jsonl"), file_name
        assert file_name.isprintable() and "/" not in file_name and "\\" not in file_name, file_name
        assert not file_name.startswith(".") and len(file_name) <= 206, file_name
    assert f'filename="{fallback}"' in header and '"' not in fallback
    if name != fallback:
        encoded = header.split("filename*=UTF-8''", 1)[1]
        assert unquote(encoded) == name and quote(name, safe="!#$&+-.^_`|~") == encoded


def test_an_id_that_is_printable_keeps_every_character_in_filename_star():
    assert unicode_file_name('ünï "ç" ódé.jsonl') == 'ünï "ç" ódé.jsonl'
    assert unicode_file_name("café") == "café.jsonl" and ascii_file_name("café") == "cafe.jsonl"


async def test_the_export_route_sends_it(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    session = 'ünï "ç" ódé.jsonl'
    run_scripted_session(tracer, clock, headers={"x-session-id": quote(session, safe="")})
    assert tracer.flush(5.0)
    try:
        transport = httpx.ASGITransport(app=viewer_app(tracer, KEYS))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            response = await client.get(f"/v1/traces/sessions/{quote(session, safe='')}/export",
                                        headers={"authorization": "Bearer k-acme"})
    finally:
        tracer.stop()
    assert response.status_code == 200 and response.headers["content-disposition"] == export_disposition(session)
    assert "filename*=UTF-8''%C3%BCn%C3%AF" in response.headers["content-disposition"]
