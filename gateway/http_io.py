"""Reading request bodies, noticing a client that left, and streaming SSE.

Invariants:
- a client that leaves while sending its body raises `ClientGone`, like one that leaves
  later;
- a body is never buffered past `max_body_bytes` (413 as soon as it is exceeded, from
  Content-Length or while reading), and one that nests deeper than `MAX_JSON_DEPTH` is a
  400, so everything after may walk it recursively; so is one with a string that has no
  UTF-8 form (an unpaired surrogate escape);
- `race_disconnect` runs work until it finishes or the client disconnects; in the second
  case the work is cancelled (its `finally` blocks run, so backends free their resources)
  and `ClientGone` is raised;
- `EventStreamResponse` stops pulling from its chunk iterator and closes it as soon as the
  client disconnects, even when no chunk is due (a listener watches `receive`); a stream
  the server's shutdown timeout cuts ends with its `on_cut` event and a whole body, so the
  client reads why instead of a connection closed mid-body; a stream whose client stopped
  reading is cut with its connection and one line of ours in the log;
- a body sent with a `Content-Encoding` (gzip...) is refused with a 415 saying so, never
  parsed as if it were plain JSON (nor read as a plain upload: `refuse_encoded_body`);
- no read of a body waits more than `[server] body_timeout_s` for its next piece
  (gateway/body_timeout.py, around the whole app).
"""
from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from agents_trace.json_text import MAX_JSON_DEPTH, has_lone_surrogate, json_depth, loads_standard, may_hold_surrogates
from gateway.errors import ApiError, body_too_large, invalid_request
from gateway.http_protocol import DROP_CONNECTION

T = TypeVar("T")
log = logging.getLogger("stepahead.gateway")


class ClientGone(Exception):
    """The client disconnected before the response was complete."""


def refuse_encoded_body(request: Request, send_instead: str = "plain JSON") -> None:
    """A 415 `unsupported_content_encoding` when `request`'s body is declared encoded (any
    `Content-Encoding` but `identity`, in any of its header fields: QA113 sent `identity`,
    then `gzip`): no route decodes one, and none reads one as plain; `send_instead` says
    what to send."""
    codings = [part.strip() for field in request.headers.getlist("content-encoding") for part in field.split(",")]
    coding = next((part for part in codings if part and part.lower() != "identity"), None)
    if coding is not None:
        raise ApiError(415, f"The request body is sent with 'Content-Encoding: {coding[:40]}'; encoded bodies are "
                       f"not supported: send {send_instead}.", "invalid_request_error", "unsupported_content_encoding")


async def read_json_body(request: Request, max_body_bytes: int) -> Any:
    refuse_encoded_body(request)
    declared = ascii_int(request.headers.get("content-length"))
    if declared is not None and declared > max_body_bytes:
        raise body_too_large(max_body_bytes)
    chunks: list[bytes] = []
    num_bytes = 0
    try:
        async for chunk in request.stream():
            num_bytes += len(chunk)
            if num_bytes > max_body_bytes:
                raise body_too_large(max_body_bytes)
            chunks.append(chunk)
    except ClientDisconnect:
        raise ClientGone() from None  # left while sending the body: no one to answer
    raw = b"".join(chunks)
    if not raw.strip():
        raise invalid_request("The request body is empty; send a JSON object.")
    try:
        body = loads_standard(raw)
    except ValueError as exc:   # not JSON, not UTF-8, NaN/Infinity, or a number past what Python holds
        raise ApiError(400, f"We could not parse the JSON body of your request: {_json_problem(exc)}",
                       "invalid_request_error", "invalid_json") from None
    except RecursionError:
        raise _nested_too_deep() from None
    if json_depth(body) > MAX_JSON_DEPTH:
        raise _nested_too_deep()
    if may_hold_surrogates(raw) and has_lone_surrogate(body):
        raise ApiError(400, "We could not parse the JSON body of your request: a string in it holds an unpaired "
                       "UTF-16 surrogate (U+D800 to U+DFFF), which is not a Unicode character.",
                       "invalid_request_error", "invalid_json")
    return body


def ascii_int(text: str | None) -> int | None:
    """`text` as a whole number when it is ASCII digits only (`str.isdigit` and `int` take
    any script's digits, "٣٦٠٠" and "²" too), else None."""
    return int(text) if text is not None and text.isascii() and text.isdigit() else None


def counted_body(request: Request, on_received: Callable[[int], None],
                 on_piece: Callable[[bytes], None] | None = None) -> Request:
    """`request` whose body tells `on_received` how many of its bytes came so far, at each
    piece (it may raise, to stop the read there), and `on_piece` each piece itself."""
    received = 0

    async def receive() -> dict:
        nonlocal received
        message = await request.receive()
        if message["type"] == "http.request":
            piece = message.get("body", b"")
            received += len(piece)
            on_received(received)
            if on_piece is not None:
                on_piece(piece)
        return message
    return Request(request.scope, receive)


def limited_body(request: Request, max_body_bytes: int) -> Request:
    """`request` whose body, however it is sent (a declared length or chunks), is a 413
    (`body_too_large`, raised from reading it) once more than `max_body_bytes` came:
    what reads it (a multipart parser spooling to disk) stops there."""
    def check(received: int) -> None:
        if received > max_body_bytes:
            raise body_too_large(max_body_bytes)
    return counted_body(request, check)


def _json_problem(exc: ValueError) -> str:
    """What was wrong with a body `json.loads` refused, in our words: an integer past
    Python's digit limit is named as such, without the interpreter's advice to raise it."""
    text = str(exc)
    if text.startswith("Exceeds the limit"):
        digits = re.search(r"\((\d+) digits\)", text)
        limit = f"{int(digits.group(1)):,}" if digits else "4,300"
        return f"a number in it has more than {limit} digits."
    return text


def _nested_too_deep() -> ApiError:
    return ApiError(400, f"The JSON body of your request nests arrays or objects more than {MAX_JSON_DEPTH} "
                    "levels deep; we do not accept it.", "invalid_request_error", "invalid_json")


async def wait_for_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def race_disconnect(work: Awaitable[T], receive: Receive) -> T:
    work_task = asyncio.ensure_future(work)
    watch_task = asyncio.ensure_future(wait_for_disconnect(receive))
    try:
        await asyncio.wait((work_task, watch_task), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        # NOTE: we are cancelled ourselves (server shutdown): let the work unwind fully
        # before anyone closes the iterators it is using.
        work_task.cancel()
        watch_task.cancel()
        await asyncio.gather(work_task, watch_task, return_exceptions=True)
        raise
    watch_task.cancel()
    if work_task.done():
        return work_task.result()
    work_task.cancel()
    await asyncio.gather(work_task, return_exceptions=True)
    raise ClientGone()


class StreamStalled(ClientGone):
    """The client took no byte of its stream for `EventStreamResponse.stalled_write_s`:
    it stopped reading, and is treated as gone."""


class EventStreamResponse(Response):
    """`text/event-stream` response fed by an async iterator of ready-made SSE bytes.

    `on_close(completed)` runs exactly once when the stream ends, with completed=False when
    the client left first or the server cut the stream. `on_cut()`, if given, is the last
    event to send when the server's shutdown cancels the stream midway (uvicorn's
    `timeout_graceful_shutdown`).

    Invariants: the event loop is handed back after every chunk sent (a client gone makes
    uvicorn's `send` return at once, and a backlog of ready events then held the loop,
    every tenant waiting, until all of it was encoded); a chunk the client does not take
    within `stalled_write_s` (it stopped reading, its window full) ends the stream as if it
    left, so it holds no slot and buffers no reply without end; a stream the shutdown cuts
    is closed (`on_close`: charged, traced) before its cut event is sent, and that send
    waits at most `cut_write_s`.

    NOTE: uvicorn writes a chunk whole or not at all (it awaits flow control before it
    writes), so after a cut between chunks the body can still be ended cleanly.
    """

    media_type = "text/event-stream"
    stalled_write_s = 60.0
    cut_write_s = 1.0

    def __init__(self, chunks: AsyncIterator[bytes], *, headers: dict[str, str],
                 on_close: Callable[[bool], None], on_cut: Callable[[], bytes] | None = None) -> None:
        super().__init__(content=b"", status_code=200, headers=headers)
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self.raw_headers.append((b"cache-control", b"no-cache"))
        self.raw_headers.append((b"x-accel-buffering", b"no"))
        self._chunks = chunks
        self._on_close = on_close
        self._on_cut = on_cut
        self._started = self._ended = self._closed = False

    async def _pump(self, send: Send) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(None) as stall:   # armed only while a chunk is being sent
                await send({"type": "http.response.start", "status": self.status_code,
                            "headers": self.raw_headers})
                self._started = True
                async for chunk in self._chunks:
                    stall.reschedule(loop.time() + self.stalled_write_s)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    stall.reschedule(None)
                    await asyncio.sleep(0)   # the loop's turn: the disconnect watcher, other tenants
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except TimeoutError:
            raise StreamStalled() from None
        self._ended = True

    def _cut_event(self) -> bytes | None:
        """The event ending a stream the shutdown cut midway (its maker records the cut, so
        `on_close` counts it as one), None when there is none to send."""
        if not self._started or self._ended or self._on_cut is None:
            return None
        return self._on_cut()

    async def _end_cut_stream(self, send: Send, event: bytes | None) -> None:
        if event is None:
            return
        try:
            async with asyncio.timeout(self.cut_write_s):   # a client not reading gets no more
                await send({"type": "http.response.body", "body": event, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except Exception:   # the connection went meanwhile, or its window stayed full: nothing left to tell
            pass

    async def _close(self, completed: bool) -> None:
        """Close the chunks' iterator and run `on_close`, once."""
        if self._closed:
            return
        self._closed = True
        aclose = getattr(self._chunks, "aclose", None)
        if aclose is not None:
            await aclose()
        self._on_close(completed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        completed = False
        try:
            await race_disconnect(self._pump(send), receive)
            completed = True
        except StreamStalled:
            drop = scope.get("extensions", {}).get(DROP_CONNECTION)
            if drop is not None:   # the body cannot end (the client's window is full): its connection goes
                drop()
            log.warning("stepahead: a stream to %s was cut: a write to its client waited %g s",
                        scope.get("path"), self.stalled_write_s)
        except (ClientGone, OSError):
            pass
        except asyncio.CancelledError:   # the server's shutdown cut the stream
            event = self._cut_event()
            await self._close(False)   # charged and traced (as cut) before anything waits on the client
            await self._end_cut_stream(send, event)
            raise
        finally:
            await self._close(completed)


def fields_of(body: Any, known: tuple[str, ...], required: tuple[str, ...] = ()) -> dict:
    """`body` as an object of `known` fields with the `required` ones: else a 400 naming the
    field (an unknown one is not dropped: a misspelt field would be a silent default)."""
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.")   # as `schemas.validate` says it
    for key in body:
        if key not in known:
            raise invalid_request(f"Unrecognized request argument supplied: {key}", param=key,
                                  code="unknown_parameter")
    for key in required:
        if key not in body:
            raise invalid_request(f"Missing required parameter: '{key}'.", param=key, code="missing_required_parameter")
    return body
