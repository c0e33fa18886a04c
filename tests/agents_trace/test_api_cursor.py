"""The sessions list's keyset cursor (`?before=` / `next_before`): pages neither repeat
nor lose a session that moved meanwhile, stay within the caller's tenant, and a bad
cursor is a 400 naming it."""
from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.agents_trace.helpers import ManualClock, make_tracer, viewer_app
from tests.agents_trace.test_api import KEYS, _get


@pytest.fixture
def many_sessions(tmp_path):
    """acme's sessions a-00 .. a-09 and globex's g-00 .. g-04, one step each, a second apart
    (interleaved: the newest is a-09); `step(tenant, name)` gives a session a step now."""
    from agents_trace.records import StepResult

    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)

    def step(tenant: str, name: str) -> None:
        ctx = tracer.begin(tenant, {"x-session-id": name},
                           {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
        clock.advance(0.1)
        tracer.end(ctx, StepResult(num_input_tokens=5, num_output_tokens=1, finish_reason="stop", output_text="ok"))
        clock.advance(1.0)
        assert tracer.flush(5.0)

    for i in range(10):
        step("acme", f"a-{i:02d}")
        if i % 2:
            step("globex", f"g-{i // 2:02d}")
    yield tracer, step
    tracer.stop()


async def test_api_sessions_pages_by_cursor_neither_repeat_nor_lose_a_session_that_moved(many_sessions):
    """Page 1 (a-09 .. a-06); a-04, on page 2, is active again and a new session starts:
    the pages after the cursor hold the rest, each once, all but a-04 (now above them),
    where `offset` would list a-07 and a-06 again."""
    tracer, step = many_sessions
    app = viewer_app(tracer, KEYS)

    async def page(query: str) -> dict:
        response = await _get(app, f"/v1/traces/sessions?limit=4&{query}", "k-acme")
        assert response.status_code == 200, response.text
        return response.json()

    first = await page("")
    names = [s["session"] for s in first["data"]]
    assert names == ["a-09", "a-08", "a-07", "a-06"] and first["has_more"]
    step("acme", "a-04")
    step("acme", "a-new")
    shifted = await page("offset=4")
    assert [s["session"] for s in shifted["data"][:2]] == ["a-07", "a-06"]   # what paging by offset did
    cursor = first.get("next_before") or ""
    later = []
    while cursor:
        more = await page(f"before={quote(cursor)}")
        later += [s["session"] for s in more["data"]]
        cursor = more["next_before"] if more["has_more"] else ""
    assert not set(names) & set(later), "no session of page 1 repeats"
    assert later == ["a-05", "a-03", "a-02", "a-01", "a-00"], "none lost but a-04, which moved to the top"
    assert [s["session"] for s in (await page(""))["data"][:2]] == ["a-new", "a-04"]


async def test_api_sessions_cursor_stays_within_the_callers_tenant(many_sessions):
    """A cursor narrows the caller's own list only: another tenant's cursor, or one forged
    to name another tenant's session, lists the caller's sessions after that key; an
    admin's `?tenant=` stays applied after a cursor."""
    tracer, _ = many_sessions
    app = viewer_app(tracer, KEYS)

    async def listed(query: str, key: str) -> list[tuple[str, str]]:
        response = await _get(app, f"/v1/traces/sessions?{query}", key)
        assert response.status_code == 200, response.text
        return [(s["tenant"], s["session"]) for s in response.json()["data"]]

    acme_cursor = (await _get(app, "/v1/traces/sessions?limit=2", "k-acme")).json()["next_before"]
    globex = await listed(f"before={quote(acme_cursor)}", "k-globex")
    assert globex and {tenant for tenant, _ in globex} == {"globex"}
    everyone = (await _get(app, "/v1/traces/sessions?limit=500", "k-admin")).json()["data"]
    newest_globex = next(s for s in everyone if s["tenant"] == "globex")
    from agents_trace.query_params import list_cursor
    forged = list_cursor({**newest_globex, "last_s": newest_globex["last_s"] + 1})
    assert {tenant for tenant, _ in await listed(f"before={quote(forged)}", "k-acme")} == {"acme"}
    assert await listed(f"before={quote(forged)}&tenant=globex", "k-acme") == []
    admin = await listed(f"tenant=acme&before={quote(acme_cursor)}", "k-admin")
    assert admin == [("acme", f"a-{i:02d}") for i in range(7, -1, -1)]
    walked, cursor = [], ""
    while True:   # the admin's whole list a page of 3 at a time: every tenant's, each once, in order
        page = (await _get(app, f"/v1/traces/sessions?limit=3&before={quote(cursor)}", "k-admin")).json()
        walked += [(s["tenant"], s["session"]) for s in page["data"]]
        if not page["has_more"]:
            break
        cursor = page["next_before"]
    assert walked == [(s["tenant"], s["session"]) for s in everyone] and len(walked) == 15


async def test_api_a_bad_sessions_cursor_is_a_400_naming_it(many_sessions):
    import base64

    tracer, _ = many_sessions
    app = viewer_app(tracer, KEYS)

    def b64(text: str) -> str:
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    for value in ("x", "!!!!", "é", b64("[1, 2]"), b64('["a", "b", "c"]'), b64('[NaN, "a", "b"]'),
                  b64('[true, "a", "b"]'), b64('{"last_s": 1}'), b64('[1e999, "a", "b"]'), b64("[" * 5000),
                  b64('[1, "a", "b", "c"]'), b64('[1, "a", 2]'), b64(str(10 ** 400))):
        for query in (f"before={quote(value)}", f"tenant=globex&before={quote(value)}"):
            response = await _get(app, f"/v1/traces/sessions?{query}", "k-acme")
            assert response.status_code == 400, value
            assert response.json()["detail"] == {
                "message": f"Query parameter 'before' must be the next_before of a page of the list, "
                           f"not {value!r}.", "param": "before", "code": "invalid_value"}
    assert (await _get(app, "/v1/traces/sessions?before=", "k-acme")).json()["data"]   # empty: absent
