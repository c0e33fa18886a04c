"""A client that half-closes its connection (`shutdown(SHUT_WR)` after its requests, as
`nc -N` and some proxies do) still gets its answers, then the connection closes; a request
the EOF cut short is not served; a client that closed its socket is still told as gone.
QA190: every answer that waited on a thread or an await was lost (uvicorn closed the
connection at EOF and took the request for a client gone)."""
import asyncio
import json
import socket
import time

import pytest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from tests.gateway.serving import start_server


async def slow(request: Request):
    body = await request.body()
    await asyncio.sleep(0.2)   # the client's EOF comes meanwhile
    return JSONResponse({"body_bytes": len(body), "path": request.url.path})


async def threaded(request: Request):
    await request.body()
    await run_in_threadpool(time.sleep, 0.1)
    return JSONResponse({"threaded": True})


async def stream(request: Request):
    await asyncio.sleep(0.2)   # the client's EOF comes before the answer begins (after it: a close)

    async def chunks():
        for number in range(5):
            await asyncio.sleep(0.05)
            yield f"data: {number}\n\n".encode()
    return StreamingResponse(chunks(), media_type="text/event-stream")


async def waits(request: Request):
    """Never answers: records when (and whether) it learns its client left."""
    await request.body()
    request.app.state.waiting.append(time.monotonic())
    message = await request.receive()   # uvicorn: `http.disconnect` once its client is gone
    request.app.state.gone.append((message["type"], time.monotonic()))
    return JSONResponse({})


async def streams_then_waits(request: Request):
    """Streams one chunk, then writes nothing until its client leaves (a worker's queue, a
    held upstream); records when it learns that."""
    async def chunks():
        yield b"data: first\n\n"
        request.app.state.waiting.append(time.monotonic())
        message = await request.receive()
        request.app.state.gone.append((message["type"], time.monotonic()))
        yield b"data: never\n\n"
    return StreamingResponse(chunks(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def app():
    app = Starlette(routes=[Route("/slow", slow, methods=["POST"]), Route("/threaded", threaded, methods=["POST"]),
                            Route("/stream", stream), Route("/waits", waits, methods=["POST"]),
                            Route("/streams_then_waits", streams_then_waits)])
    app.state.waiting, app.state.gone = [], []
    return app


@pytest.fixture(scope="module")
def server(app):
    running = start_server(app)
    yield running
    running.stop()


def _request(path: str = "/slow", body: bytes = b"{}", version: bytes = b"1.1") -> bytes:
    return (b"POST " + path.encode() + b" HTTP/" + version + b"\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def _half_closed_exchange(server, data: bytes, *, wait_s: float = 5.0) -> bytes:
    """What the server answers to `data` sent then half-closed, until it closes the
    connection (a TimeoutError if it never does)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=wait_s) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


def _answers(answer: bytes) -> list[tuple[str, bytes]]:
    """(status line, body) of each final answer in `answer` (Content-Length framed)."""
    found = []
    while answer:
        head, _, rest = answer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next((int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length:")), 0)
        if not lines[0].startswith(b"HTTP/1.1 1"):
            found.append((lines[0].decode(), rest[:length]))
        answer = rest[length:]
    return found


@pytest.mark.parametrize("path", ["/slow", "/threaded"])
def test_a_half_closed_client_gets_its_answer_then_the_connection_closes(server, path):
    began = time.monotonic()
    answer = _half_closed_exchange(server, _request(path))
    assert time.monotonic() - began < 3.0
    ((status, body),) = _answers(answer)
    assert status == "HTTP/1.1 200 OK" and json.loads(body) in ({"body_bytes": 2, "path": "/slow"}, {"threaded": True})
    assert b"\r\nconnection: close\r\n" in answer.lower()
    assert answer.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")   # the probe, once


def test_pipelined_requests_before_a_half_close_are_all_answered_in_order(server):
    body = b'"' + b"x" * 3000 + b'"'
    answer = _half_closed_exchange(server, _request(body=b"{}") + _request(body=body) + _request("/threaded"))
    assert [(status, json.loads(text)) for status, text in _answers(answer)] == [
        ("HTTP/1.1 200 OK", {"body_bytes": 2, "path": "/slow"}),
        ("HTTP/1.1 200 OK", {"body_bytes": len(body), "path": "/slow"}),
        ("HTTP/1.1 200 OK", {"threaded": True})]
    assert answer.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")   # (again past PROBE_EVERY_S)


def test_a_refusal_owed_after_pipelined_requests_is_sent_before_the_half_closed_connection_closes(server):
    """QA195 F3: the answer before it no longer says `connection: close` and ends the
    connection with the refusal unsent."""
    answer = _half_closed_exchange(server, _request() + b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n")
    assert [status for status, _ in _answers(answer)] == ["HTTP/1.1 200 OK", "HTTP/1.1 400 Bad Request"]


def test_a_stream_to_a_half_closed_client_is_delivered_whole(server):
    answer = _half_closed_exchange(server, b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b"HTTP/1.1 200 OK" in answer and answer.endswith(b"0\r\n\r\n")   # the last chunk
    assert [f"data: {number}".encode() in answer for number in range(5)] == [True] * 5


def _told_gone_after(app, server, data: bytes, then) -> float:
    """Seconds from `then(sock)` (after `data` was sent) until the app's /waits learnt its
    client left."""
    waiting, gone = app.state.waiting, app.state.gone
    num_gone = len(gone)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(data)
        deadline_s = time.monotonic() + 3
        while len(waiting) <= num_gone and time.monotonic() < deadline_s:
            time.sleep(0.01)
        then(sock)
    closed_at = time.monotonic()
    while len(gone) <= num_gone and time.monotonic() < closed_at + 5:
        time.sleep(0.01)
    assert len(gone) == num_gone + 1, "the app never learnt its client left"
    message_type, told_at = gone[-1]
    assert message_type == "http.disconnect"
    return told_at - closed_at


def test_an_http_1_0_request_half_closed_is_a_client_gone_at_once(app, server):
    """No probe may go to HTTP/1.0 (RFC 9110), so its EOF cannot be told from a close: a
    close it is (QA195 F1: behind nginx, which speaks HTTP/1.0 upstream, every client that
    left had its whole answer generated)."""
    assert _told_gone_after(app, server, _request("/waits", version=b"1.0"),
                            lambda sock: sock.shutdown(socket.SHUT_WR)) < 1.0


def test_a_client_that_read_the_probe_then_closed_is_told_as_gone(app, server):
    """QA195 F2: the first probe drew no reset (the socket was still open); a later one does."""
    def read_the_probe_then_close(sock):
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert _told_gone_after(app, server, _request("/waits"), read_the_probe_then_close) < 2.5


@pytest.mark.parametrize("cut", [b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Le",   # a head cut short
                                 _request(body=b'{"a": 1}')[:-3]])                   # a body cut short
def test_a_request_the_eof_cuts_short_is_not_served_but_those_before_it_are(server, cut):
    answer = _half_closed_exchange(server, _request() + cut)
    assert [status for status, _ in _answers(answer)] == ["HTTP/1.1 200 OK"]
    assert answer.count(b"HTTP/1.1 200 OK") == 1
    assert _half_closed_exchange(server, cut) == b""   # alone: closed without an answer, as before


def test_a_client_that_closed_its_socket_is_still_told_as_gone(app, server):
    """A close sends the same FIN as a half-close: the probe's reset tells them apart."""
    assert _told_gone_after(app, server, _request("/waits"), lambda sock: None) < 1.0


def test_peer_reset_tells_a_closed_socket_from_a_half_closed_one_once_it_got_a_byte():
    from gateway.half_close import PROBE, peer_reset

    class Transport:   # what `peer_reset` reads of an asyncio transport
        def __init__(self, sock):
            self.sock = sock

        def get_extra_info(self, name):
            return self.sock if name == "socket" else None

    with socket.create_server(("127.0.0.1", 0)) as listener:
        seen = {}
        for how in ("half-close", "close"):
            client = socket.create_connection(listener.getsockname())
            accepted, _ = listener.accept()
            client.shutdown(socket.SHUT_WR) if how == "half-close" else client.close()
            assert accepted.recv(10) == b""   # both are the same EOF here
            accepted.sendall(PROBE)
            time.sleep(0.05)   # the reset's round trip (loopback)
            seen[how] = peer_reset(Transport(accepted))
            accepted.close()
            client.close()
    assert seen == {"half-close": False, "close": True}
    assert peer_reset(Transport(None)) is False


def test_a_client_that_closes_during_a_quiet_stream_is_told_as_gone_at_once(app, server):
    """An EOF while an answer is being written is a close (no chunk would draw the reset that
    tells one): the stream's app learns it at once, not when it next writes."""
    def read_the_first_chunk(sock):
        first = sock.recv(65536)
        assert b"data: first" in (first if b"data: first" in first else first + sock.recv(65536))
    assert _told_gone_after(app, server, b"GET /streams_then_waits HTTP/1.1\r\nHost: x\r\n\r\n",
                            read_the_first_chunk) < 1.0
