"""The methods each resource under `/v1/traces/sessions/...` takes, and the route that
answers any other method with a 405 listing exactly them.

One path template (session_path: the tail holds the id, `/`s and all) serves a session
(`GET`, `HEAD`, `DELETE`), its export and a step's content (`GET`, `HEAD`); no id at all
(`/v1/traces/sessions/`) redirects to the list (`GET`, `HEAD`). Starlette answers a method
mismatch from the first route matching the path, with that route's methods only, and
cannot tell the resources apart. Invariant: a 405 here lists in `Allow` every method its
path takes and no other (as docs/serving.md says of every path), from `SESSION_METHODS`
alone, before authentication, as the router's own 405s come.
"""
from __future__ import annotations

from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.types import Receive, Scope, Send

from agents_trace.session_path import SessionResource, parse_session_path

SESSION_METHODS: dict[SessionResource, tuple[str, ...]] = {
    "session": ("GET", "HEAD", "DELETE"), "export": ("GET", "HEAD"), "content": ("GET", "HEAD")}
NO_ID_METHODS = ("GET", "HEAD")   # `/v1/traces/sessions/`: a redirect to the list


def allowed_methods(tail: str, raw_path: bytes | None) -> tuple[str, ...]:
    """The methods the path whose tail (after `/v1/traces/sessions/`) is `tail` takes."""
    return SESSION_METHODS[parse_session_path(tail, raw_path).resource] if tail else NO_ID_METHODS


def method_not_allowed(allowed: tuple[str, ...]) -> HTTPException:
    """The 405 for a path taking `allowed` (the gateway keeps its `Allow` in its error body's answer)."""
    return HTTPException(405, "Method Not Allowed", headers={"Allow": ", ".join(allowed)})


class SessionTailRoute(APIRoute):
    """An APIRoute of the session tail whose 405 (a method none of the path's routes take,
    or one this route takes that the resource does not: DELETE of an export) lists the
    resource's methods (`allowed_methods`) rather than the route's."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        tail = scope.get("path_params", {}).get("tail", "")
        allowed = allowed_methods(tail, scope.get("raw_path"))
        if scope["method"] not in allowed:
            raise method_not_allowed(allowed)
        await super().handle(scope, receive, send)
