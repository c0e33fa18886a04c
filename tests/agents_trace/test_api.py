"""The /v1/traces router: tenant scoping, admin view, pages, content, export, the page."""
from __future__ import annotations

import json
import re
import sqlite3
from urllib.parse import quote

import httpx
import pytest

from agents_trace.api import Viewer
from agents_trace.header_ids import encode_header_id

from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session, viewer_app
from tests.agents_trace.long_sessions import add_user_turns
from tests.gateway.serving import start_server

# the page's scripts, in the order index.html loads them (app.js last: it starts the page)
SCRIPTS = ("dom.js", "charts.js", "address.js", "list_sort.js", "list.js", "session.js", "session_live.js",
           "app.js")
KEYS = {"k-acme": Viewer("acme"), "k-globex": Viewer("globex"),
        "k-admin": Viewer("ops", is_admin=True)}


@pytest.fixture
def traced(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    contexts = run_scripted_session(tracer, clock, tenant="acme")
    run_scripted_session(tracer, clock, tenant="globex", headers={"x-session-id": "shared"})
    run_scripted_session(tracer, clock, tenant="acme", headers={"x-session-id": "shared"})
    assert tracer.flush(5.0)
    yield tracer, contexts[0].session
    tracer.stop()


async def _get(app, path, key):
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.get(path, headers={"authorization": f"Bearer {key}"})


async def test_api_tenant_sees_only_its_sessions(traced):
    tracer, session = traced
    app = viewer_app(tracer, KEYS)
    mine = (await _get(app, "/v1/traces/sessions", "k-acme")).json()
    assert {s["tenant"] for s in mine["data"]} == {"acme"} and len(mine["data"]) == 2
    assert (await _get(app, f"/v1/traces/sessions/{session}", "k-acme")).status_code == 200
    assert (await _get(app, f"/v1/traces/sessions/{session}", "k-globex")).status_code == 404
    assert (await _get(app, f"/v1/traces/sessions/{session}?tenant=acme",
                       "k-globex")).status_code == 404
    assert (await _get(app, f"/v1/traces/sessions/{session}/export", "k-globex")).status_code \
        == 404
    assert (await _get(app, f"/v1/traces/sessions/{session}/steps/0/content",
                       "k-globex")).status_code == 404
    other = (await _get(app, "/v1/traces/sessions?tenant=acme", "k-globex")).json()
    assert other["data"] == []
    assert (await _get(app, "/v1/traces/sessions", "wrong")).status_code == 401


async def test_api_same_id_in_two_tenants_stays_apart(traced):
    tracer, _ = traced
    app = viewer_app(tracer, KEYS)
    for key, tenant in (("k-acme", "acme"), ("k-globex", "globex")):
        detail = (await _get(app, "/v1/traces/sessions/shared", key)).json()
        assert detail["session"]["tenant"] == tenant
    ambiguous = await _get(app, "/v1/traces/sessions/shared", "k-admin")
    assert ambiguous.status_code == 409 and ambiguous.json()["detail"]["param"] == "tenant"
    detail = (await _get(app, "/v1/traces/sessions/shared?tenant=globex", "k-admin")).json()
    assert detail["session"]["tenant"] == "globex"


async def test_api_admin_sees_all_tenants(traced):
    tracer, session = traced
    app = viewer_app(tracer, KEYS)
    listed = (await _get(app, "/v1/traces/sessions", "k-admin")).json()
    assert {s["tenant"] for s in listed["data"]} == {"acme", "globex"}
    assert (await _get(app, "/v1/traces/me", "k-admin")).json() == {"tenant": "ops",
                                                                   "is_admin": True, "tracing": True}
    assert (await _get(app, f"/v1/traces/sessions/{session}", "k-admin")).status_code == 200


async def test_api_session_detail_pages_steps_and_loads_content_lazily(traced):
    tracer, session = traced
    app = viewer_app(tracer, KEYS)
    first = (await _get(app, f"/v1/traces/sessions/{session}?limit=2", "k-acme")).json()
    assert [s["index"] for s in first["steps"]["data"]] == [0, 1]
    assert first["steps"]["has_more"] is True
    assert "new_messages" not in first["steps"]["data"][0]
    rest = (await _get(app, f"/v1/traces/sessions/{session}?limit=2&offset=2", "k-acme")).json()
    assert [s["index"] for s in rest["steps"]["data"]] == [2] and not rest["steps"]["has_more"]
    content = (await _get(app, f"/v1/traces/sessions/{session}/steps/1/content",
                          "k-acme")).json()
    assert content["num_prefix_messages"] == 2
    assert [m["role"] for m in content["new_messages"]] == ["assistant", "tool"]
    assert content["output"]["tool_calls"][0]["function"]["name"] == "book_table"


async def test_api_export_streams_trace_jsonl(traced):
    tracer, session = traced
    response = await _get(viewer_app(tracer, KEYS), f"/v1/traces/sessions/{session}/export",
                          "k-acme")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert lines[0]["format"] == "stepahead-trace/1" and len(lines) == 4


async def test_api_serves_the_page_without_data(traced):
    tracer, _ = traced
    app = viewer_app(tracer, KEYS)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        page = await client.get("/ui")
        script = await client.get("/ui/static/list.js")
        missing = await client.get("/ui/static/secret.db")
    assert page.status_code == 200 and "stepahead" in page.text
    assert script.status_code == 200 and "/v1/traces/sessions" in script.text
    assert missing.status_code == 404


def test_head_answers_wherever_get_does_with_the_same_headers_and_no_body(traced):
    """As the gateway's own routes do: `HEAD /ui` (a link checker, a load balancer's probe)
    is the page's headers, not a 405; the trace API's reads the same, still authenticated."""
    tracer, session = traced
    server = start_server(viewer_app(tracer, KEYS))
    try:
        with httpx.Client(base_url=server.base_url, timeout=30) as client:
            for path, key in (("/ui", None), ("/ui/static/app.js", None), ("/v1/traces/sessions", "k-acme"),
                              (f"/v1/traces/sessions/{session}", "k-acme")):
                headers = {"authorization": f"Bearer {key}"} if key else {}
                got, head = client.get(path, headers=headers), client.head(path, headers=headers)
                assert got.status_code == head.status_code == 200, (path, head.status_code)
                assert head.content == b"" and head.headers["content-type"] == got.headers["content-type"]
                assert head.headers.get("content-security-policy") == got.headers.get("content-security-policy")
            assert client.head("/v1/traces/sessions").status_code == 401
            assert client.head(f"/v1/traces/sessions/{session}",
                               headers={"authorization": "Bearer k-globex"}).status_code == 404
    finally:
        server.stop()


async def test_the_page_and_its_files_carry_the_viewers_security_headers(traced):
    """A strict CSP (own scripts, styles and API only; never framed), no framing, nosniff,
    no referrer: on the page and on each static file."""
    tracer, _ = traced
    transport = httpx.ASGITransport(app=viewer_app(tracer, KEYS))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        answers = [await client.get(path) for path in ("/ui", *(f"/ui/static/{name}" for name in SCRIPTS),
                                                      "/ui/static/app.css")]
    for answer in answers:
        assert answer.status_code == 200
        policy = dict(part.strip().split(" ", 1) for part in answer.headers["content-security-policy"].split(";"))
        assert policy["default-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
        assert policy["script-src"] == "'self'" and policy["style-src"] == "'self'"
        assert policy["connect-src"] == "'self'" and "unsafe" not in answer.headers["content-security-policy"]
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "no-referrer"
        assert answer.headers["cache-control"] == "no-store"
    page = answers[0].text   # nothing inline that the policy would block
    assert "<style" not in page and " style=" not in page and not re.search(r"\son[a-z]+\s*=", page)
    assert re.findall(r"<script[^>]*>", page) == [f'<script src="/ui/static/{name}">' for name in SCRIPTS]
    assert policy["img-src"] == "data:"   # the page's inline icon only: no request for a favicon


async def test_api_bad_query_parameters_are_400_not_422(traced):
    tracer, session = traced
    app = viewer_app(tracer, KEYS)
    for path, code in (("/v1/traces/sessions?limit=0", "integer_below_min_value"),
                       ("/v1/traces/sessions?since=yesterday", "invalid_value"),
                       (f"/v1/traces/sessions/{session}?offset=-1", "integer_below_min_value"),
                       ("/v1/traces/sessions?limit=ten", "invalid_value")):
        response = await _get(app, path, "k-acme")
        detail = response.json()["detail"]
        assert response.status_code == 400 and "must be " in detail["message"]
        assert detail["code"] == code and detail["param"] in path   # OpenAI's codes for a bound (QA136)
    for index in ("x", "99999999999999999999999", "\u00b2", "-1", "999"):   # no such step: 404, not 500
        missing = await _get(app, f"/v1/traces/sessions/{session}/steps/{index}/content", "k-acme")
        assert missing.status_code == 404
        assert missing.json()["detail"].startswith(f"No step '{index}'")   # not "no captured content"


async def test_api_export_of_matching_sessions_is_one_trace_within_the_callers_tenant(traced):
    tracer, _ = traced
    app = viewer_app(tracer, KEYS)
    response = await _get(app, "/v1/traces/export", "k-acme")
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/x-ndjson")
    header, *lines = [json.loads(line) for line in response.text.splitlines()]
    assert header["format"] == "stepahead-trace/1" and header["note"] == "stepahead: 2 sessions of tenant acme"
    assert {line["tenant"] for line in lines} == {"acme"} and len(lines) == 6
    assert [line["t"] for line in lines] == sorted(line["t"] for line in lines) and lines[0]["t"] == 0
    # another tenant's sessions are no sessions at all; an admin sees every tenant's
    foreign = (await _get(app, "/v1/traces/export?tenant=globex", "k-acme")).text.splitlines()
    assert len(foreign) == 1 and json.loads(foreign[0])["note"] == "stepahead: 0 sessions of tenant acme"
    everything = (await _get(app, "/v1/traces/export", "k-admin")).text.splitlines()
    assert {json.loads(line)["tenant"] for line in everything[1:]} == {"acme", "globex"} and len(everything) == 10
    # the list's filters, and its 400 for a bad one
    later = (await _get(app, f"/v1/traces/export?since={1_700_000_000 + 10}", "k-acme")).text.splitlines()
    assert {json.loads(line)["session"] for line in later[1:]} == {"shared"}
    bad = await _get(app, "/v1/traces/export?since=soon", "k-acme")
    assert bad.status_code == 400 and bad.json()["detail"]["param"] == "since"


async def test_api_exports_say_how_many_failed_steps_they_left_out(tmp_path):
    """A refused step (nothing generated) has no line in an export; the API says how many
    it left out, in a header and in the merged export's note, as the CLI does on stderr."""
    from agents_trace.records import StepResult

    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    for error in ("rate_limit_exceeded", None, "model_not_found"):
        ctx = tracer.begin("acme", {"x-session-id": "mixed"}, body)
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=10, num_output_tokens=0 if error else 4, error=error))
    tracer.stop()
    app = viewer_app(tracer, KEYS)
    one = await _get(app, "/v1/traces/sessions/mixed/export", "k-acme")
    assert one.headers["x-stepahead-failed-steps-left-out"] == "2" and len(one.text.splitlines()) == 2
    merged = await _get(app, "/v1/traces/export", "k-acme")
    assert merged.headers["x-stepahead-failed-steps-left-out"] == "2"
    header, *lines = [json.loads(line) for line in merged.text.splitlines()]
    assert header["note"] == ("stepahead: 1 session of tenant acme; 2 failed step(s) left out "
                              "(refused, nothing generated)") and len(lines) == 1
    assert (await _get(app, "/v1/traces/export", "k-globex")).headers["x-stepahead-failed-steps-left-out"] == "0"


async def test_api_stats_are_scoped_like_the_sessions(traced):
    tracer, _ = traced
    app = viewer_app(tracer, KEYS)
    mine = (await _get(app, "/v1/traces/stats", "k-acme")).json()
    assert [row["tenant"] for row in mine["tenants"]] == ["acme"]
    assert (mine["total"]["sessions"], mine["total"]["steps"]) == (2, 6)
    assert (await _get(app, "/v1/traces/stats?tenant=globex", "k-acme")).json() == {"tenants": [], "total": None}
    everyone = (await _get(app, "/v1/traces/stats", "k-admin")).json()
    assert [row["tenant"] for row in everyone["tenants"]] == ["acme", "globex"] and everyone["total"]["steps"] == 9
    only_globex = (await _get(app, "/v1/traces/stats?tenant=globex", "k-admin")).json()
    assert only_globex["total"]["steps"] == 3
    bad = await _get(app, "/v1/traces/stats?until=-1", "k-acme")
    assert bad.status_code == 400 and bad.json()["detail"]["param"] == "until"


async def test_api_a_tenant_deletes_its_own_session_never_anothers(traced):
    tracer, session = traced
    app = viewer_app(tracer, KEYS)
    transport = httpx.ASGITransport(app=app)

    async def delete(path: str, key: str) -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.delete(path, headers={"authorization": f"Bearer {key}"})

    from agents_trace.step_queries import step_content

    assert step_content(tracer.store_path, "acme", session, 0) is not None   # captured, to be deleted too
    assert (await delete(f"/v1/traces/sessions/{session}", "k-globex")).status_code == 404   # not its own
    assert (await _get(app, f"/v1/traces/sessions/{session}", "k-acme")).status_code == 200
    deleted = await delete(f"/v1/traces/sessions/{session}", "k-acme")
    assert deleted.status_code == 200 and deleted.json() == {
        "id": session, "object": "trace.session.deleted", "deleted": True, "tenant": "acme", "num_steps": 3}
    assert (await _get(app, f"/v1/traces/sessions/{session}", "k-acme")).status_code == 404
    assert step_content(tracer.store_path, "acme", session, 0) is None
    assert (await delete("/v1/traces/sessions/shared", "k-admin")).status_code == 409   # in two tenants: name one
    assert (await delete("/v1/traces/sessions/shared?tenant=globex", "k-admin")).json()["tenant"] == "globex"
    assert (await _get(app, "/v1/traces/sessions/shared", "k-acme")).json()["session"]["tenant"] == "acme"


async def test_api_finds_sessions_by_part_of_their_id_within_the_callers_tenant(traced):
    tracer, session = traced
    app = viewer_app(tracer, KEYS)

    async def found(query: str, key: str) -> list[tuple[str, str]]:
        page = (await _get(app, f"/v1/traces/sessions?{query}", key)).json()
        return sorted((s["tenant"], s["session"]) for s in page["data"])

    assert await found("id_contains=har", "k-acme") == [("acme", "shared")]   # acme's only
    assert await found("id_contains=har", "k-admin") == [("acme", "shared"), ("globex", "shared")]
    assert await found(f"id_contains={session[-6:]}", "k-acme") == [("acme", session)]
    assert await found("id_contains=%25", "k-admin") == []                      # literal text, no wildcard
    assert await found("id_contains=SHARED", "k-admin") == [("acme", "shared"), ("globex", "shared")]   # any case
    steps = (await _get(app, f"/v1/traces/sessions/{session}", "k-acme")).json()["steps"]["data"]
    request_id = steps[1]["response_id"]   # the x-request-id of the session's second step
    assert await found(f"id_contains={request_id}", "k-acme") == [("acme", session)]
    assert await found(f"id_contains={request_id}", "k-admin") == [("acme", session)]
    assert await found(f"id_contains={request_id}", "k-globex") == []   # not its request


# ids a client may name its session by; "x" beside "x/export", whose plain URL is x's export;
# a newline (`metadata.session_id` may hold one) is `%0A` in the URL, and a newline to the route
ODD_IDS = ("proj/run-1", "x", "x/export", "a/steps/1/content", "export", "with space", "100%", "what?",
           "#tag", "über/日本 ✓", "a//b/", "/lead", "a/../b", "nl1\nnl2", "two\nlines/export\n.", "tab\there")


@pytest.fixture
def odd_ids(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    for session in ODD_IDS:
        run_scripted_session(tracer, clock, tenant="acme", headers={"x-session-id": session})
    assert tracer.flush(5.0)
    yield tracer
    tracer.stop()


def _encoded(session: str) -> str:
    """The viewer's URL of a session (encodeURIComponent)."""
    return "/v1/traces/sessions/" + quote(session, safe="-_.!~*'()")


async def _delete(app, path, key):
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.delete(path, headers={"authorization": f"Bearer {key}"})


def _exported_sessions(response: httpx.Response) -> set[str]:
    header, *lines = [json.loads(line) for line in response.text.splitlines()]
    assert header["format"] == "stepahead-trace/1" and len(lines) == 3
    return {line["session"] for line in lines}


async def test_api_any_session_id_is_read_exported_and_deleted_in_its_encoded_form(odd_ids):
    app = viewer_app(odd_ids, KEYS)
    for session in ODD_IDS:
        path = _encoded(session)
        detail = await _get(app, path, "k-acme")
        assert detail.status_code == 200, session
        assert detail.json()["session"]["session"] == session and len(detail.json()["steps"]["data"]) == 3
        content = await _get(app, path + "/steps/1/content", "k-acme")
        assert content.status_code == 200 and content.json()["num_prefix_messages"] == 2, session
        export = await _get(app, path + "/export", "k-acme")
        assert export.status_code == 200 and _exported_sessions(export) == {session}
        assert (await _get(app, path, "k-globex")).status_code == 404   # still another tenant's
    for session in ODD_IDS:
        deleted = await _delete(app, _encoded(session), "k-acme")
        assert deleted.status_code == 200 and deleted.json()["id"] == session
        assert (await _get(app, _encoded(session), "k-acme")).status_code == 404
    assert (await _get(app, "/v1/traces/sessions", "k-acme")).json()["data"] == []


async def test_api_a_slash_in_a_session_id_may_also_go_plain(odd_ids):
    app = viewer_app(odd_ids, KEYS)
    plain = await _get(app, "/v1/traces/sessions/proj/run-1", "k-acme")
    assert plain.status_code == 200 and plain.json()["session"]["session"] == "proj/run-1"
    assert _exported_sessions(await _get(app, "/v1/traces/sessions/proj/run-1/export", "k-acme")) \
        == {"proj/run-1"}
    # a tail /export is the export: plain `x/export` is x's; the id `x/export` is sent encoded
    assert _exported_sessions(await _get(app, "/v1/traces/sessions/x/export", "k-acme")) == {"x"}
    assert (await _get(app, "/v1/traces/sessions/x%2Fexport", "k-acme")).json()["session"]["session"] \
        == "x/export"
    content = await _get(app, "/v1/traces/sessions/a%2Fsteps%2F1%2Fcontent/steps/1/content", "k-acme")
    assert content.status_code == 200 and content.json()["num_prefix_messages"] == 2
    assert (await _delete(app, "/v1/traces/sessions/x%2Fexport/export", "k-acme")).status_code == 405
    deleted = await _delete(app, "/v1/traces/sessions/proj/run-1", "k-acme")
    assert deleted.status_code == 200 and deleted.json()["id"] == "proj/run-1"
    assert (await _get(app, "/v1/traces/sessions/proj%2Frun-1", "k-acme")).status_code == 404
    listed = await _get(app, "/v1/traces/sessions/", "k-acme")   # no id: the list, as before
    assert listed.status_code == 307 and listed.headers["location"].endswith("/v1/traces/sessions")


def test_api_session_ids_with_odd_characters_over_a_real_server(odd_ids):
    """uvicorn decodes `%2F` into the path it routes on; the raw path keeps it."""
    server = start_server(viewer_app(odd_ids, KEYS))
    try:
        with httpx.Client(base_url=server.base_url, timeout=30,
                          headers={"authorization": "Bearer k-acme"}) as client:
            for session in ODD_IDS:
                detail = client.get(_encoded(session))
                assert detail.status_code == 200 and detail.json()["session"]["session"] == session
                assert _exported_sessions(client.get(_encoded(session) + "/export")) == {session}
            assert client.get("/v1/traces/sessions/proj/run-1").json()["session"]["session"] == "proj/run-1"
            assert _exported_sessions(client.get("/v1/traces/sessions/x/export")) == {"x"}
            assert client.get("/v1/traces/sessions/proj%2Frun-1/steps/2/content").status_code == 200
            assert client.delete("/v1/traces/sessions/proj%2Frun-1").json()["deleted"] is True
            assert client.get("/v1/traces/sessions/proj%2Frun-1").status_code == 404
            assert client.get("/v1/traces/sessions/x%2Fexport",
                              headers={"authorization": "Bearer k-globex"}).status_code == 404
    finally:
        server.stop()


@pytest.fixture
def header_ids(tmp_path):
    """acme's sessions whose answers' `x-session-id` is percent-encoded, and "a%41" beside
    "aA" (what "a%41" decodes to); globex's "theirs 5%"."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    for tenant, session in (("acme", "job 100%"), ("acme", "café"), ("acme", "a%41"), ("acme", "aA"),
                            ("globex", "theirs 5%")):
        run_scripted_session(tracer, clock, tenant=tenant, headers={"x-session-id": encode_header_id(session)})
    assert tracer.flush(5.0)
    yield tracer
    tracer.stop()


async def test_api_an_answers_percent_encoded_session_header_finds_its_session(header_ids):
    """The `x-session-id` an answer carries (`job 100%25`, `caf%C3%A9`) pasted as the id
    opens, exports and deletes its session, and finds it with `id_contains`; an id as
    given comes first, and another tenant's session stays out of reach."""
    app = viewer_app(header_ids, KEYS)

    async def found(text: str, key: str = "k-acme") -> list[tuple[str, str]]:
        page = (await _get(app, "/v1/traces/sessions?id_contains=" + quote(text, safe=""), key)).json()
        return sorted((s["tenant"], s["session"]) for s in page["data"])

    assert [encode_header_id(session) for session in ("job 100%", "café")] == ["job 100%25", "caf%C3%A9"]
    for session in ("job 100%", "café"):
        path = _encoded(encode_header_id(session))
        detail = await _get(app, path, "k-acme")
        assert detail.status_code == 200 and detail.json()["session"]["session"] == session
        assert len(detail.json()["steps"]["data"]) == 3
        assert (await _get(app, path + "/steps/1/content", "k-acme")).json()["num_prefix_messages"] == 2
        assert _exported_sessions(await _get(app, path + "/export", "k-acme")) == {session}
        assert await found(encode_header_id(session)) == [("acme", session)]
    assert await found("f%C3%A9") == [("acme", "café")] and await found("100%25") == [("acme", "job 100%")]
    assert await found("%41") == [("acme", "a%41"), ("acme", "aA")]   # either form
    assert (await _get(app, _encoded("a%41"), "k-acme")).json()["session"]["session"] == "a%41"   # as given first
    # another tenant's session, in either form: none to acme, as an unknown id
    assert (await _get(app, _encoded("theirs 5%25"), "k-acme")).status_code == 404
    assert await found("theirs 5%25") == [] and await found("theirs 5%25", "k-admin") == [("globex", "theirs 5%")]
    assert (await _get(app, _encoded("theirs 5%25"), "k-admin")).json()["session"]["tenant"] == "globex"
    assert (await _delete(app, _encoded("theirs 5%25"), "k-acme")).status_code == 404
    deleted = await _delete(app, _encoded("caf%C3%A9"), "k-acme")
    assert deleted.status_code == 200 and deleted.json()["id"] == "café"
    assert (await _get(app, _encoded("café"), "k-acme")).status_code == 404


def test_api_a_session_id_with_a_newline_is_a_session_not_an_unknown_route(odd_ids):
    """`%0A` decodes to a newline in the path the route matches: a missing such session is
    the API's own 404, not Starlette's "Not Found" for no route."""
    server = start_server(viewer_app(odd_ids, KEYS))
    try:
        with httpx.Client(base_url=server.base_url, timeout=30,
                          headers={"authorization": "Bearer k-acme"}) as client:
            missing = client.get("/v1/traces/sessions/no%0Asuch")
            assert missing.status_code == 404 and "visible to this API key" in missing.json()["detail"]
            assert client.get(_encoded("nl1\nnl2") + "/steps/0/content").json()["index"] == 0
            deleted = client.delete(_encoded("nl1\nnl2"))
            assert deleted.status_code == 200 and deleted.json()["id"] == "nl1\nnl2"
    finally:
        server.stop()


@pytest.fixture
def seven_steps(tmp_path):
    """Session "long" of acme, steps 0..6, step 2 then lost (as a failing store loses one):
    the stored indexes 0 1 3 4 5 6 are at offsets 0 1 2 3 4 5."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    request_ids = add_user_turns(tracer, clock, 7)
    run_scripted_session(tracer, clock, tenant="acme", headers={"x-session-id": "other"})
    assert tracer.flush(5.0)
    with sqlite3.connect(tracer.store_path) as db:
        db.execute("DELETE FROM steps WHERE session = 'long' AND idx = 2")
    yield tracer, request_ids
    tracer.stop()


async def test_api_session_detail_pages_to_the_step_a_request_id_names(seven_steps):
    tracer, request_ids = seven_steps
    app = viewer_app(tracer, KEYS)

    async def detail(query: str, key: str = "k-acme") -> dict:
        response = await _get(app, f"/v1/traces/sessions/long?{query}", key)
        assert response.status_code == 200
        return response.json()

    def indexes(page: dict) -> list[int]:
        return [step["index"] for step in page["steps"]["data"]]

    # step 5 is the 5th stored (offset 4): the page of 3 from offset 3 holds it, whatever `offset` said
    named = await detail(f"limit=3&offset=0&request_id={request_ids[5]}")
    assert named["request_step"] == {"index": 5, "offset": 4}
    assert indexes(named) == [4, 5, 6] and named["steps"]["offset"] == 3 and named["steps"]["has_more"] is False
    first = await detail(f"limit=3&request_id={request_ids[1]}")
    assert first["request_step"] == {"index": 1, "offset": 1} and indexes(first) == [0, 1, 3]
    assert first["steps"]["has_more"] is True
    whole = await detail(f"request_id={request_ids[6]}")   # the default page of 200: all six
    assert whole["request_step"] == {"index": 6, "offset": 5} and indexes(whole) == [0, 1, 3, 4, 5, 6]
    # no such step in this session (lost, another session's, not a request id): the page at `offset`
    scripted = (await _get(app, "/v1/traces/sessions/other", "k-acme")).json()["steps"]["data"]
    for missing in (request_ids[2], scripted[1]["response_id"], "long", request_ids[5][:-1]):
        page = await detail(f"limit=3&offset=3&request_id={missing}")
        assert page["request_step"] is None and indexes(page) == [4, 5, 6], missing
    assert (await detail("limit=3"))["request_step"] is None   # not asked
    # another tenant's key sees no session at all, request id or not
    assert (await _get(app, f"/v1/traces/sessions/long?request_id={request_ids[5]}", "k-globex")).status_code == 404


async def test_api_errors_parameter_takes_the_usual_booleans_and_400s_anything_else(traced):
    tracer, session = traced
    app = viewer_app(tracer, KEYS)
    with sqlite3.connect(tracer.store_path) as db:   # acme's `session` has an error now
        db.execute("UPDATE sessions SET num_errors = 1 WHERE tenant = 'acme' AND session = ?", (session,))

    async def listed(value: str) -> list[str]:
        response = await _get(app, f"/v1/traces/sessions?errors={value}", "k-acme")
        assert response.status_code == 200, value
        return sorted(s["session"] for s in response.json()["data"])

    everything = sorted([session, "shared"])
    for value in ("1", "true", "TRUE", "True", "yes", "YES", "on", "On", "%20on%20"):
        assert await listed(value) == [session], value
    for value in ("0", "false", "FALSE", "no", "No", "off", "OFF", ""):
        assert await listed(value) == everything, value
    for path in ("/v1/traces/sessions", "/v1/traces/export"):
        for value in ("maybe", "2", "-1", "t", "y", "enabled", "onn", "true1"):
            response = await _get(app, f"{path}?errors={value}", "k-acme")
            assert response.status_code == 400, (path, value)
            assert response.json()["detail"] == {
                "message": f"Query parameter 'errors' must be true or false (also 1/0, yes/no, on/off), "
                           f"not '{value}'.", "param": "errors", "code": "invalid_value"}
    # checked for a tenant asking for another's sessions too, before it gets none
    assert (await _get(app, "/v1/traces/sessions?tenant=globex&errors=maybe", "k-acme")).status_code == 400


async def test_api_bad_number_messages_write_their_range_in_whole_numbers(traced):
    tracer, session = traced
    app = viewer_app(tracer, KEYS)
    expected = {
        f"/v1/traces/sessions/{session}?offset=-1":
            "Query parameter 'offset' must be a number in [0, 4611686018427387904], not '-1'.",
        "/v1/traces/sessions?offset=4611686018427387905":
            "Query parameter 'offset' must be a number in [0, 4611686018427387904], not '4611686018427387905'.",
        "/v1/traces/sessions?limit=501": "Query parameter 'limit' must be a number in [1, 500], not '501'.",
        "/v1/traces/stats?since=-1": "Query parameter 'since' must be Unix seconds in [0, 1000000000000], a duration "
                                     "such as 30m, 2h or 7d, or a date such as 2026-12-01 or 2026-12-01T14:30, not '-1'.",
        "/v1/traces/sessions?until=1e13":
            "Query parameter 'until' must be Unix seconds in [0, 1000000000000], a duration such as 30m, 2h or 7d, "
            "or a date such as 2026-12-01 or 2026-12-01T14:30, not '1e13'.",
    }
    for path, message in expected.items():
        response = await _get(app, path, "k-acme")
        assert response.status_code == 400 and response.json()["detail"]["message"] == message, path
