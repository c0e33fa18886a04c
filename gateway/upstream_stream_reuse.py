"""A litellm stream's connection goes back to the pool without a read timer running, so the
next request to that upstream never fails at once with a spurious 504 `upstream_timeout`
("time taken=0.0 seconds", QA147).

The cause is aiohttp's (3.14), under litellm's aiohttp transport: when the gateway reads a
stream more slowly than the upstream sends it (a long reply; a busy CPU; a slow client
behind it), the stream's buffer passes its high-water mark and aiohttp pauses reading with
the end of the body still unparsed. The read that later drains the buffer resumes reading,
which parses that end: the body is complete, so the connection goes back to the pool at once,
and then `ResponseHandler.resume_reading` restarts the `sock_read` timer of the connection it
has just given back. `timeout_s` later the idle, pooled connection stores a
`SocketTimeoutError`, and the next request that takes it from the pool (any model on the same
`api_base`) raises it before waiting for anything. Reading the stream to `[DONE]`, or
closing it, changes nothing: the connection was given back at the body's end, before the
gateway read its last chunks.

Invariant: once a litellm chat stream's body has ended, a read timer that runs on its
connection while no new request has started on it is cancelled, on the event loop's next
turn (after the resume that restarted it). A connection a new request took keeps its own
timer (`timeout_s` still bounds that request), and a connection keeps its place in the pool.
What this reads of aiohttp, httpx and litellm is private to them, so it is read
defensively: a stream of another shape (another transport, a future aiohttp) is left as it
is. `disarm_reply_at_end` takes an aiohttp response itself (passthrough's own session has
the same bug, once 8 MiB, twice its `read_bufsize`, wait unread).
"""
from __future__ import annotations

import asyncio
from typing import Any

import aiohttp


def aiohttp_reply_of(stream: Any) -> aiohttp.ClientResponse | None:
    """The aiohttp response under an OpenAI SDK stream (litellm's raw chat stream) that
    litellm's aiohttp transport carries (`AsyncStream.response`, httpx's bound stream,
    litellm's `AiohttpResponseStream`); None for a stream of any other shape."""
    body = getattr(getattr(stream, "response", None), "stream", None)
    body = getattr(body, "_stream", body)
    reply = getattr(body, "_aiohttp_response", None)
    return reply if isinstance(reply, aiohttp.ClientResponse) else None


def disarm_at_end(stream: Any) -> None:
    """`disarm_reply_at_end` for the aiohttp response under `stream` (`aiohttp_reply_of`);
    nothing for a stream of another shape."""
    reply = aiohttp_reply_of(stream)
    if reply is not None:
        disarm_reply_at_end(reply)


def disarm_reply_at_end(reply: aiohttp.ClientResponse) -> None:
    """Have the read timer that aiohttp may restart on `reply`'s connection after its body
    ends cancelled (`_disarm`), while the reply still holds the connection; nothing when it
    holds none (its body already ended while no read was paused: no timer is restarted)."""
    protocol = getattr(reply.connection, "protocol", None)
    parser = getattr(protocol, "_parser", None)
    if parser is None or not callable(getattr(protocol, "_drop_timeout", None)):
        return
    loop = asyncio.get_running_loop()

    def at_end() -> None:   # (inside the read that parsed the end: the timer restarts after it)
        if not loop.is_closed():
            loop.call_soon(_disarm, protocol, parser)

    reply.content.on_eof(at_end)


def _disarm(protocol: Any, parser: Any) -> None:
    """Cancel the read timer of the connection whose body `parser` read, unless a new
    request has started on it: each request's response gets a parser of its own
    (`set_response_params`), and starts its own timer once its request is sent."""
    if getattr(protocol, "_parser", None) is parser:
        protocol._drop_timeout()
