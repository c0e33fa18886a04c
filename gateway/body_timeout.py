"""Request bodies that stall: no read of a body waits more than `[server] body_timeout_s`
for its next piece (`BodyTimeout`, ASGI middleware around the whole app, so every route
and reader of a body alike: the chat fast path, JSON bodies, uploads); past it the read
raises `BodyTimedOut` (a 408 `request_timeout`) and the answer closes the connection.
Before, a body that trickled in was bounded in size, not in time: an authenticated client
held its connection, and an upload its tenant's quota reservation, as long as it liked
(QA163).
"""
from __future__ import annotations

import asyncio

from starlette.types import Receive, Scope, Send

from gateway.errors import ApiError


class BodyTimedOut(ApiError):
    """A request body that sent no byte for `[server] body_timeout_s` while it was read:
    a 408 `request_timeout`. Readers that turn their errors into others (an upload's 413)
    let this one through."""


def body_timed_out(timeout_s: float) -> BodyTimedOut:
    return BodyTimedOut(408, f"The request body sent nothing for {timeout_s:g} s while it was read "
                        "(`[server] body_timeout_s`); send it again, without pauses that long.",
                        "invalid_request_error", "request_timeout")


class BodyTimeout:
    """ASGI middleware bounding the wait for each piece of a request's body to `timeout_s`
    (idle time: a large body on a slow but steady link passes). Invariants: only reads
    before the body's last piece are timed (the disconnect listeners after it wait as
    long as they need); a read past the time, and every body read after it, raises
    `BodyTimedOut`; the answer to such a request carries `Connection: close` (the rest
    of its body is never read: nothing after it could be told from it)."""

    def __init__(self, app, timeout_s: float) -> None:
        self.app, self.timeout_s = app, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body_done = timed_out = False

        async def timed_receive() -> dict:
            nonlocal body_done, timed_out
            if body_done:
                return await receive()
            if timed_out:
                raise body_timed_out(self.timeout_s)
            try:
                async with asyncio.timeout(self.timeout_s):
                    message = await receive()
            except TimeoutError:
                timed_out = True
                raise body_timed_out(self.timeout_s) from None
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        async def closing_send(message: dict) -> None:
            if timed_out and message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), (b"connection", b"close")]}
            await send(message)

        await self.app(scope, timed_receive, closing_send)
