"""Which session, and which of its resources, the end of a `/v1/traces/sessions/...` path names.

A session id is whatever text a client named it by (agents_trace.conversation): it may
hold `/`, `%`, `?`, `#`, spaces, any unicode. The viewer sends it as one percent-encoded
path segment (`encodeURIComponent`: `proj%2Frun-1`); a hand-typed URL may carry its `/`
plain (`proj/run-1`). The server (uvicorn) decodes `%2F` to `/` in the path it routes
on, so the route takes the whole tail (`session_tail_route`) and this module splits it.

Invariants:
- the tail is split only at the `/`s that were literal in the request's raw path
  (`raw_path`, still percent-encoded): an encoded id is one segment whatever it holds,
  so every id has a URL, its `/` sent as `%2F`;
- a tail ending in `/export` or `/steps/{n}/content` names that resource of the session
  before it; any other tail is the session itself. So `a%2Fexport` is session `a/export`,
  `a%2Fexport/export` its export, and the plain `a/export` the export of `a`;
- without a raw path that ends in the tail (a server that sends none) every `/` counts
  as literal, as in the plain form;
- the route's tail matches any characters, a newline too (`%0A` decodes to one, and an id
  may hold it): Starlette's `{tail:path}` (`.*`, no DOTALL) would not match it at all.
NOTE: an id that is just `.` or `..` cannot be sent from a browser or httpx: they remove
such dot segments before sending, even encoded (`%2E`). The CLI reaches those.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

from starlette.convertors import PathConvertor, register_url_convertor

SessionResource = Literal["session", "export", "content"]


@dataclass(frozen=True, slots=True)
class SessionPath:
    """`session`'s `resource`; `step` the step index as sent (content only), unchecked."""

    session: str
    resource: SessionResource = "session"
    step: str | None = None


class SessionTailConvertor(PathConvertor):
    """Starlette's `path` convertor (the rest of the path, `/`s and all) matching every
    character: `path`'s `.*` stops at a newline."""

    regex = "(?s:.*)"


SESSION_TAIL_CONVERTOR = "session_tail"


def session_tail_route(prefix: str) -> str:
    """`prefix` then a `{tail}` parameter that takes the rest of the path, whatever it
    holds. Starlette looks convertors up by name in its one process-wide table when a route
    is compiled, so this (re)registers ours there first: the convertor holds no state, and
    registering it again changes nothing."""
    register_url_convertor(SESSION_TAIL_CONVERTOR, SessionTailConvertor())
    return prefix + "{tail:" + SESSION_TAIL_CONVERTOR + "}"


def raw_tail_segments(tail: str, raw_path: bytes | None) -> list[str] | None:
    """The still-encoded `/`-separated segments of the end of `raw_path` that decodes to
    `tail` (decoded as uvicorn does: UTF-8, bad bytes replaced), or None when there is none.

    The shortest such end is the one: a shorter end of the right one decodes to a shorter
    text (it starts after a literal `/`), so it cannot equal `tail`."""
    if not raw_path:
        return None
    segments = raw_path.split(b"?", 1)[0].decode("latin-1").split("/")
    for count in range(1, len(segments) + 1):
        if unquote("/".join(segments[-count:])) == tail:
            return segments[-count:]
    return None


def parse_session_path(tail: str, raw_path: bytes | None) -> SessionPath:
    """What `tail` (the decoded path after `/v1/traces/sessions/`) names; `raw_path` is the
    request's (ASGI `scope["raw_path"]`), None where the server gave none."""
    raw = raw_tail_segments(tail, raw_path)
    segments = tail.split("/") if raw is None else [unquote(segment) for segment in raw]
    if len(segments) >= 2 and segments[-1] == "export":
        return SessionPath("/".join(segments[:-1]), "export")
    if len(segments) >= 4 and segments[-3] == "steps" and segments[-1] == "content":
        return SessionPath("/".join(segments[:-3]), "content", segments[-2])
    return SessionPath("/".join(segments))
