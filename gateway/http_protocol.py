"""The gateway's HTTP/1.1 connections (uvicorn's httptools protocol), with two guards
uvicorn leaves out: the head of a request (request line and headers) is at most
`MAX_HEAD_BYTES`, and it must arrive within `HEAD_TIMEOUT_S` of its first byte (of the
connection, for the first request). uvicorn keeps a head of any size in memory and waits
for one forever, so a single anonymous connection sending an endless header slowed every
tenant (QA: a chat took 19 s instead of 0.02 s), and connections that never finished a
request stayed open (1,000 of 1,000 after 90 s).

Invariants: a head past the limit is answered 431, a head that does not arrive in
time 408, and a request the parser refuses 400, each in OpenAI's error shape, and the connection is closed (one over which no
byte of a request came is closed without an answer); nothing reaches the app then, and
nothing after it is read. Such an answer comes after the answers owed to the requests
before it on the connection (a client pipelining takes answers in order); a request whose
body the parser refused has that 400 as its one answer (none, if the app had answered it
already). A lost connection tells every request on it not yet answered. A client's EOF
(a half-close: `shutdown(SHUT_WR)`, `nc -N`) before any answer on the connection is under
way ends reading, not the connection: the requests received whole are still answered, in order, the last with `connection: close`, and the
connection closes after it (at once when none is owed); a request the EOF cut short (its head
or body incomplete) never reaches the app or, if it did, sees its client gone and gets no
answer; a client that closed its socket rather than half-closing it is still told as gone
(`gateway/half_close.py`: a probe, then the socket's reset; QA190). An EOF that comes while
an answer is being written (a stream), or on an HTTP/1.0 request (which may not be sent the
probe), is a client gone, at once, as before: a client seldom half-closes so late, and one
that closed must not hold a stream waiting on its next chunk (a worker's queue, a held
upstream) or have its whole answer generated for nobody (QA195: nginx speaks HTTP/1.0 to
its upstreams by default). Each
such answer carries a fresh `x-request-id` (`gateway.ids.new_id("req")`, as the app's own
answers under /v1/ do; on any path: the head, and so the path, may not have been read).
Only bytes up to a head's blank line count, checked before the parser sees them: a read
holding a whole request (head and a large body) is never taken for one long head, and a
long head in one read is refused all the same; a head that begins in a read after another
request's end is measured once the parser has read it (its line and fields), before the
app sees it. Bodies are the app's to bound (`[server] max_body_bytes`, `max_file_bytes`);
a connection idle between requests is closed by uvicorn after `keep_alive_s`.
Each request's scope offers the app `DROP_CONNECTION` (in `extensions`): a response it
cannot end (its client stopped reading, gateway/http_io.py) closes the connection at once,
and uvicorn takes it as a client gone, not as an app that left its response unfinished.
A request asking to switch protocols (`Connection: upgrade` with `Upgrade: websocket`,
`h2c`...) is answered as the HTTP/1.1 request it also is, and its connection closed after
the answer: the parser reads nothing after such a head (it leaves the rest to the new
protocol), so a body that came with it was lost and bytes after it were read as the next
request (QA113: a body holding `GET /v1/models` was answered; request smuggling behind a
proxy). One that carries a body is refused (400 `upgrade_not_supported`) without reaching
the app, as its body cannot be read. A body sent with a transfer coding other than
`chunked` (`Transfer-Encoding: gzip, chunked`) is refused the same way (501
`unsupported_transfer_encoding`, as RFC 9112 asks of a coding the server does not know):
the parser undoes only the chunking, so such a body was read as its still-encoded bytes
(QA163: a gzipped body taken for broken JSON, a plain one served as if unencoded).
A chunked body's trailer fields are dropped, never request headers, and bounded as a
head is (`gateway/http_trailers.py`). An HTTP/1.1 request without a `Host` header, or any
request with two or with an invalid one, is refused (400 `invalid_http_request`, as RFC
9112 §3.2 asks; QA228) as the other heads are.
`uvicorn_protocols()` is how every uvicorn server of the gateway is to be set up: these
connections, and a WebSocket upgrade served as the plain HTTP request it also is (the app
has no WebSocket route: it answers OpenAI-shaped, a 404 for an unknown path, never
uvicorn's bare 403 to a handshake it would reject).
"""
from __future__ import annotations

import asyncio
import functools
import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.half_close import EofWatch
from gateway.http_head_checks import has_body, host_problem, unknown_transfer_coding
from gateway.http_trailers import TrailerGuard
from gateway.ids import new_id

MAX_HEAD_BYTES = 64 * 1024   # nginx's default large_client_header_buffers is 4 x 8 KiB
HEAD_TIMEOUT_S = 30.0
DROP_CONNECTION = "stepahead.drop_connection"
REASONS = {400: "Bad Request", 408: "Request Timeout", 431: "Request Header Fields Too Large", 501: "Not Implemented"}


def uvicorn_protocols() -> dict[str, object]:
    """The protocol options of `uvicorn.Config` for the gateway: these guarded HTTP/1.1
    connections, and no WebSocket protocol (an upgrade is answered as plain HTTP)."""
    return {"http": GuardedHttpToolsProtocol, "ws": "none"}


def refusal_bytes(status: int, message: str, code: str) -> bytes:
    """A whole HTTP/1.1 answer with an OpenAI-shaped error body (serialized as the app's
    are) and a new `x-request-id`, closing the connection."""
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                 "code": code}}, separators=(",", ":")).encode()
    return (f"HTTP/1.1 {status} {REASONS[status]}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nx-request-id: {new_id('req')}\r\n"
            "connection: close\r\n\r\n").encode() + body


class GuardedHttpToolsProtocol(TrailerGuard, HttpToolsProtocol):
    max_head_bytes = MAX_HEAD_BYTES
    head_timeout_s = HEAD_TIMEOUT_S

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True   # the bytes coming are a request's head (until its headers are complete)
        self._head_bytes = 0
        self._num_heads = 0   # heads completed on this connection: a read that completed one was not all head
        self._head_tail = b""   # the last bytes of the head so far: its blank line may span two reads
        self._head_timer: asyncio.TimerHandle | None = None
        self._switch_asked = False   # a head asked to switch protocols: nothing after it is read
        self._head_refused = False   # a head refused once read whole (no request cycle): never reached the app
        self._cycles: list = []   # this connection's requests not yet answered in full, oldest first
        self._refusal: bytes | None = None   # owed once the requests before it are answered
        self._eof_watch: EofWatch | None = None   # set at the client's EOF, while answers are owed

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        if self._eof_watch is not None:
            self._eof_watch.stop()
        for cycle in self._unanswered():   # uvicorn tells only the last request parsed (QA115: a pipelined
            cycle.disconnected = True      # request's running one wrote on, "handler is closed", a traceback)
            cycle.message_event.set()
        super().connection_lost(exc)

    def eof_received(self) -> bool:
        """The client's EOF (a half-close, or a close): what came whole is answered, then the
        connection closed; a request cut short is dropped. True keeps it open meanwhile."""
        if self._eof_watch is not None or self.transport.is_closing():   # EOF again (reading resumed)
            return self._eof_watch is not None
        cut = self.cycle if not self._in_head and not self._head_refused else None   # inside a body
        if cut is not None and cut.scope is self.scope:   # that request is cut short
            self._forget(cut)
        cycles = self._unanswered()
        if cycles and (cycles[0].response_started   # mid-answer: a close, as a half-close so late seldom is
                       or any(cycle.scope.get("http_version") == "1.0" for cycle in cycles)):   # no probe there
            return False
        refusal_owed = self._refusal is not None   # (sent after the answers, it closes the connection itself)
        if not refusal_owed:
            self._close_after_owed(b"")   # nothing more is read; closed after the last answer
        cycles = self._unanswered()
        if self.transport.is_closing() or not cycles:
            return False
        if not refusal_owed and not cycles[-1].response_started:
            cycles[-1].keep_alive = False   # its answer says `connection: close`
        self._eof_watch = EofWatch(self.loop, self.transport, self._unanswered, self.transport.abort)
        self._eof_watch.start()
        return True

    def _forget(self, cycle) -> None:
        """`cycle`'s request (its body cut short) is owed no answer; its app sees its client gone."""
        self._cycles = [owed for owed in self._cycles if owed is not cycle]
        if not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()

    def _unanswered(self) -> list:
        self._cycles = [cycle for cycle in self._cycles if not cycle.response_complete]
        return self._cycles

    def data_received(self, data: bytes) -> None:
        if self._switch_asked or self._refusal is not None:   # nothing after such a head is read as HTTP
            return
        if self._in_head:
            self._arm_head_timer()
            # checked before the parser sees it, so a head past the limit never reaches the app
            if self._head_bytes + self._head_part(data) > self.max_head_bytes:
                self._refuse_long_head()
                return
        was_in_head, num_heads = self._in_head, self._num_heads
        super().data_received(data)   # the parser's callbacks may complete the head (and the whole request)
        if was_in_head and self._num_heads == num_heads and not self.transport.is_closing():   # all of `data` was head
            self._head_bytes += len(data)
            self._head_tail = data[-3:]

    def _head_part(self, data: bytes) -> int:
        """How many bytes of `data` belong to the head coming: up to its blank line when
        that is in `data` (it may begin in the last bytes of the previous read), else all."""
        seen = self._head_tail + data
        ends = [found + len(blank) for blank in (b"\r\n\r\n", b"\n\n") if (found := seen.find(blank)) >= 0]
        return max(0, min(ends) - len(self._head_tail)) if ends else len(data)

    def on_headers_complete(self) -> None:
        self._in_head, self._head_bytes, self._head_tail = False, 0, b""
        self._num_heads += 1
        self._disarm_head_timer()
        if self._refusal is not None:   # after a refused head in the same read: not read as a request
            self._head_refused = True
            return
        if len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers) > self.max_head_bytes:
            self._head_refused = True   # a head that came after another request in one read (QA118)
            self._refuse_long_head()
            return
        problem = host_problem(self.headers, self.parser.get_http_version())
        if problem is not None:
            self._head_refused = True
            self._refuse(400, problem, "invalid_http_request")
            return
        coding = unknown_transfer_coding(self.headers)
        if coding is not None:
            self._head_refused = True
            self._refuse(501, f"The request body is sent with 'Transfer-Encoding: {coding[:40]}'; this gateway "
                         "reads only chunked bodies (or a Content-Length): send the body uncompressed.",
                         "unsupported_transfer_encoding")
            return
        if self.parser.should_upgrade():
            self._switch_asked = True
            if has_body(self.headers):
                self._head_refused = True
                self._refuse(400, "The request asks to switch protocols ('Connection: upgrade' with 'Upgrade', as "
                             "curl --http2 sends over http://, or the CONNECT method) and carries a body: this "
                             "gateway speaks HTTP/1.1 only and cannot read a body sent so. Send it as plain "
                             "HTTP/1.1 (curl: --http1.1).", "upgrade_not_supported")
                return
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:   # this request's (not on an upgrade)
            self._unanswered().append(cycle)
            self.scope.setdefault("extensions", {})[DROP_CONNECTION] = functools.partial(self._drop, cycle)
            if self._switch_asked:
                cycle.keep_alive = False   # answered, then closed: nothing after its head is read

    def _unsupported_upgrade_warning(self) -> None:
        """Nothing to log: the gateway answers a request asking to switch protocols as plain
        HTTP on purpose (uvicorn's words would tell the operator to install a WebSocket
        library; any client could fill the log with them)."""

    def _drop(self, cycle) -> None:
        """Close the connection now, bytes not yet sent dropped, and mark `cycle` (the
        request whose response cannot end) as one whose client left."""
        cycle.disconnected = True
        self.transport.abort()

    def on_body(self, body: bytes) -> None:
        if not self._head_refused:   # a refused head has no request cycle
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._head_refused:
            return
        super().on_message_complete()
        self._in_head, self._head_bytes = True, 0   # the next request's head, when it comes

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._in_head or self.transport.is_closing():
            return
        if self._head_bytes == 0:   # nothing of a request came: closed without an answer nobody asked for
            self.transport.close()
            return
        self._refuse(408, f"The request's line and headers did not arrive within {self.head_timeout_s:g} s.",
                     "request_timeout")

    def send_400_response(self, msg: str) -> None:
        """A request the HTTP parser refuses (an unknown method, Content-Length with
        Transfer-Encoding, a malformed length or chunk...): OpenAI's error shape, as every
        other error, not uvicorn's plain text; the connection is closed. One whose body
        failed (its head was read: the app has it) is that request's answer, in its place,
        unless the app already began one (then the connection just closes); its app sees
        the client gone (QA118: the refusal waited for that request's own answer, which
        waited for the rest of its body: no answer, the connection held forever)."""
        self._fail_request(400, f"The HTTP request could not be parsed: {msg.rstrip('.')} (check its method, "
                           "headers and body framing).", "invalid_http_request")

    def _fail_request(self, status: int, message: str, code: str) -> None:
        """Refuse the request being read (see `send_400_response`; also its trailers' 431)."""
        failed = self.cycle if not self._in_head else None   # inside a body: the request being read
        if failed is not None:
            self._forget(failed)
            if failed.response_started:   # answered (in part) already: no second answer for it
                self._close_after_owed(b"")
                return
        self._refuse(status, message, code)

    def _refuse_long_head(self) -> None:
        self._refuse(431, f"The request's line and headers exceed {self.max_head_bytes} bytes.",
                     "request_header_fields_too_large")

    def _refuse(self, status: int, message: str, code: str) -> None:
        """Answer `status` and close the connection, once the requests before it on this
        connection are answered (a client pipelining takes answers in order: QA115 saw a
        refusal taken for the earlier request's answer, which was cut); nothing more is read."""
        self._close_after_owed(refusal_bytes(status, message, code))

    def _close_after_owed(self, last: bytes) -> None:
        """Write `last` (b"": nothing) and close the connection once the answers owed before
        it are written; nothing more is read meanwhile."""
        self._disarm_head_timer()
        self._refusal = last
        if not self._unanswered():
            self._send_refusal()

    def _send_refusal(self) -> None:
        self.transport.write(self._refusal)
        self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._refusal is not None and not self._unanswered() and not self.transport.is_closing():
            self._send_refusal()
