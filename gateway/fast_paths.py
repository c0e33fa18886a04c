"""The completion endpoints, served ahead of the framework's routing stack.

`POST /v1/chat/completions` and `POST /v1/completions` are the hot path: every agent
step. Their handlers take the raw `Request` and render every error themselves, so the
router, exception, exit-stack and body-limit layers add nothing but time (~0.1 ms per
request); this ASGI middleware calls the handlers directly. Every other path goes through
the full app. Invariant: the same handlers run either way, and anything unexpected before
a response starts leaves as an OpenAI-shaped 500, never an HTML page, on any path; it is
logged here and goes no further, so the server keeps the client's connection open (an
error that reaches uvicorn closes it, and the client's next request on it fails). A
request the server's shutdown cancels (`[server] shutdown_timeout_s` passed) before its
response began is answered a 503 `server_shutting_down` here (uvicorn's would be a
plain-text 500), with the request and session ids its handler had given it; the cancellation goes on to uvicorn, which logs it in one line
(gateway/uvicorn_server.py). A request with more than one Authorization header is
refused here, on every path, before any handler reads one (gateway/auth.py), and counted
as the handler would count a wrong key (`on_refused`). A redirect
never echoes the client's Host header: its Location is relative. Every answer on a `/v1/`
path carries an `x-request-id`, as OpenAI's do: its handler's (a generation's step id), else
a new one here.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.auth import repeated_authorization
from gateway.errors import CUT_REPLY_HEADERS, request_cut_at_shutdown, server_error
from gateway.ids import new_id

Handler = Callable[[Request], Awaitable[Response]]
log = logging.getLogger("stepahead.gateway")
REQUEST_ID = b"x-request-id"


class CompletionFastPath:
    __slots__ = ("app", "handlers", "error_response", "on_refused")

    def __init__(self, app: ASGIApp, handlers: dict[str, Handler],
                 error_response: Callable, on_refused: Callable[[Scope, int], None] = lambda scope, status: None) -> None:
        self.app = app
        self.handlers = handlers
        self.error_response = error_response
        self.on_refused = on_refused   # (scope, status) of a request refused here before its handler ran

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (refusal := repeated_authorization(scope["headers"])) is not None:
            self.on_refused(scope, refusal.status)
            await self.error_response(refusal)(scope, receive, with_request_id(scope, send))
            return
        handler = (self.handlers.get(scope["path"])
                   if scope["type"] == "http" and scope["method"] == "POST" else None)
        if handler is None:
            await self._contained(scope, receive, send)
            return
        try:
            response = await handler(Request(scope, receive))
        except asyncio.CancelledError:
            await self._cut_at_shutdown(scope, receive, send)
            raise
        except Exception:
            log.exception("unhandled error in a completion handler")
            await self.error_response(server_error())(scope, receive, with_request_id(scope, send))
            return
        await response(scope, receive, send)

    async def _contained(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The full app; an error before its response starts is answered with a 500 here,
        a cut at shutdown with a 503; a redirect's Location to this request's host is made
        relative."""
        started = False

        async def watched(message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if 300 <= message["status"] < 400:
                    message = {**message, "headers": relative_locations(message["headers"], scope)}
                message = with_request_id_header(scope, message)
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except asyncio.CancelledError:
            if not started and scope["type"] == "http":
                await self._cut_at_shutdown(scope, receive, send)
            raise
        except Exception:
            if started or scope["type"] != "http":
                raise
            log.exception("unhandled error in a request handler")
            await self.error_response(server_error())(scope, receive, with_request_id(scope, send))


    async def _cut_at_shutdown(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The 503 of a request the shutdown cut before its answer began, with the headers
        its handler left (`CUT_REPLY_HEADERS`: its traced step's id, its session, its
        tenant's rate limits), else a new `x-request-id` on a `/v1/` path."""
        response = self.error_response(request_cut_at_shutdown())
        for name, value in (scope.get(CUT_REPLY_HEADERS) or {}).items():
            response.headers[name] = value
        await response(scope, receive, with_request_id(scope, send))


def with_request_id_header(scope: Scope, start: dict) -> dict:
    """An answer's `http.response.start` message, on a `/v1/` path given a new
    `x-request-id` where it has none: every answer there carries one (the app's, and those
    made here: a refusal before any handler, a 500, a cut at shutdown; QA228: the 401 for
    two Authorization headers had none)."""
    if not scope["path"].startswith("/v1/") or any(name == REQUEST_ID for name, _ in start["headers"]):
        return start
    return {**start, "headers": [*start["headers"], (REQUEST_ID, new_id("req").encode())]}


def with_request_id(scope: Scope, send: Send) -> Send:
    """`send` for an answer made here (`with_request_id_header` on its start)."""
    async def sent(message) -> None:
        await send(with_request_id_header(scope, message) if message["type"] == "http.response.start" else message)
    return sent


def relative_locations(headers: list[tuple[bytes, bytes]], scope: Scope) -> list[tuple[bytes, bytes]]:
    """`headers` with a `Location` on the host the request named made relative (its path
    and query): Starlette builds a redirect's URL from the client's Host header, which a
    cache in front would then hand to others."""
    host = next((value for name, value in scope["headers"] if name == b"host"), None)
    kept = []
    for name, value in headers:
        if name.lower() == b"location" and host is not None:
            parts = urlsplit(value.decode("latin-1"))
            if parts.scheme in ("http", "https") and parts.netloc.encode("latin-1") == host:
                value = ("/" + parts.path.lstrip("/") + (f"?{parts.query}" if parts.query else "")).encode("latin-1")
        kept.append((name, value))
    return kept
