"""session_path: which session and resource the end of a /v1/traces/sessions/ path names,
split only at the slashes that were literal in the raw path."""
from __future__ import annotations

import random
from urllib.parse import quote, unquote

import pytest

from agents_trace.session_path import SessionPath, parse_session_path, raw_tail_segments

PREFIX = "/v1/traces/sessions/"


def _parse(raw_tail: str, *, raw_path: bool = True) -> SessionPath:
    """What the server hands the route for `raw_tail` as sent: the decoded tail and the raw path."""
    return parse_session_path(unquote(raw_tail), (PREFIX + raw_tail).encode("ascii") if raw_path else None)


@pytest.mark.parametrize(("raw_tail", "expected"), [
    ("s1", SessionPath("s1")),
    ("proj%2Frun-1", SessionPath("proj/run-1")),                     # the viewer's form
    ("proj/run-1", SessionPath("proj/run-1")),                       # typed plain
    ("proj%2Frun-1/export", SessionPath("proj/run-1", "export")),
    ("proj/run-1/export", SessionPath("proj/run-1", "export")),
    ("proj%2Frun-1/steps/2/content", SessionPath("proj/run-1", "content", "2")),
    ("x%2Fexport", SessionPath("x/export")),                         # an id ending in /export
    ("x%2Fexport/export", SessionPath("x/export", "export")),
    ("x/export", SessionPath("x", "export")),                        # plain: the export of x
    ("export", SessionPath("export")),
    ("export/export", SessionPath("export", "export")),
    ("a%2Fsteps%2F0%2Fcontent", SessionPath("a/steps/0/content")),
    ("a/steps/0/content", SessionPath("a", "content", "0")),
    ("steps/0/content", SessionPath("steps/0/content")),             # no id before it: the id
    ("a/steps/x/content", SessionPath("a", "content", "x")),         # the index is checked later
    ("a%2F%2Fb%2F", SessionPath("a//b/")),
    ("a%2F..%2Fb", SessionPath("a/../b")),
    ("100%25%20done%3F%23%C3%BC", SessionPath("100% done?#ü")),
])
def test_session_path_known_answers(raw_tail, expected):
    assert _parse(raw_tail) == expected


def test_session_path_without_a_raw_path_counts_every_slash_as_literal():
    assert _parse("x%2Fexport", raw_path=False) == SessionPath("x", "export")
    assert _parse("proj%2Frun-1", raw_path=False) == SessionPath("proj/run-1")


def test_session_path_reads_the_raw_path_past_a_query_string_and_a_root_path():
    raw = b"/gw/v1/traces/sessions/x%2Fexport?tenant=acme"
    assert parse_session_path("x/export", raw) == SessionPath("x/export")
    assert raw_tail_segments("x/export", raw) == ["x%2Fexport"]


def test_session_path_a_raw_path_that_does_not_end_in_the_tail_is_not_used():
    assert raw_tail_segments("x/export", b"/rewritten/elsewhere") is None
    assert parse_session_path("x/export", b"/rewritten/elsewhere") == SessionPath("x", "export")


def test_session_path_every_encoded_id_and_its_resources_round_trip():
    """Invariant: for any id, its encodeURIComponent form names it, and `/export` and
    `/steps/{n}/content` after it name its resources, whatever the id holds."""
    alphabet = ["/", "%", "?", "#", " ", "ü", "日", "export", "steps", "content", "0", "7", ".", "a", "%2F"]
    rng = random.Random(7)
    for _ in range(2000):
        session = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
        encoded = quote(session, safe="-_.!~*'()")   # what encodeURIComponent leaves as it is
        assert _parse(encoded) == SessionPath(session), session
        assert _parse(encoded + "/export") == SessionPath(session, "export"), session
        assert _parse(encoded + "/steps/12/content") == SessionPath(session, "content", "12"), session


def test_session_path_the_route_takes_a_tail_with_newlines_and_the_path_convertor_does_not():
    """Starlette's `{tail:path}` (`.*`) stops at a newline; the session route's tail takes it."""
    from starlette.routing import compile_path

    from agents_trace.session_path import session_tail_route

    route = session_tail_route(PREFIX)
    regex, path_format, _ = compile_path(route)
    assert path_format == PREFIX + "{tail}"
    for tail in ("nl1\nnl2", "a\n/export", "\n", "x\r\n\ty", "plain/tail", ""):
        assert regex.match(PREFIX + tail).group("tail") == tail, tail
    assert compile_path(PREFIX + "{tail:path}")[0].match(PREFIX + "nl1\nnl2") is None
    assert session_tail_route(PREFIX) == route   # registering again changes nothing
    assert compile_path(route)[0].pattern == regex.pattern
