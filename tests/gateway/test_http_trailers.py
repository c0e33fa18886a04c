"""A chunked request's trailer fields (after its last chunk) under `stepahead serve`'s HTTP
protocol (QA228 F1, F2): never request headers (an `Authorization` sent only as a trailer
authenticated a request sent in one write), and bounded as a head is (one anonymous
request held 150 MB of them); an ordinary chunked upload, in reads of any size, is served."""
from __future__ import annotations

import hashlib
import json
import select
import socket
import time

import pytest
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.app import build_app
from gateway.config import key_digest, parse_config
from gateway.http_protocol import MAX_HEAD_BYTES
from tests.gateway.serving import start_server

KEY = "sk-http-trailers"


async def echo(request: Request):
    try:
        body = await request.body()
    except ClientDisconnect:
        return Response(status_code=499)
    return JSONResponse({"body_bytes": len(body), "sha256": hashlib.sha256(body).hexdigest(),
                         "headers": [name.decode("latin-1") for name, _ in request.scope["headers"]]})


@pytest.fixture(scope="module")
def echo_port():
    running = start_server(Starlette(routes=[Route("/echo", echo, methods=["POST"])]))
    yield running.port
    running.stop()


@pytest.fixture(scope="module")
def gateway_port(tmp_path_factory):
    config = parse_config({"models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                                       "litellm_params": {"mock_response": "hi"}}],
                           "tenants": [{"name": "t", "api_key_sha256": [key_digest(KEY)]}],
                           "tracing": {"enabled": False},
                           "server": {"responses_db": str(tmp_path_factory.mktemp("gw") / "responses.sqlite3")}})
    running = start_server(build_app(config))
    yield running.port
    running.stop()


def _exchange(port: int, first: bytes, pieces: list[bytes] = (), gap_s: float = 0.01) -> bytes:
    """All the server sends on one connection to `first`, then each of `pieces` (a read of
    its own, `gap_s` apart; no more once an answer came or the connection closed), until it
    closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(first)
        for piece in pieces:
            time.sleep(gap_s)
            if select.select([sock], [], [], 0)[0]:
                break
            try:
                sock.sendall(piece)
            except OSError:
                break
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
        return answer


def _head(path: str = "/echo", extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def _status_and_body(answer: bytes) -> tuple[int, bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


CHAT = json.dumps({"model": "mock", "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.mark.parametrize("method, path, body", [("POST", "/v1/chat/completions", CHAT), ("GET", "/v1/models", b"")])
def test_an_authorization_sent_as_a_trailer_is_not_honoured(gateway_port, method, path, body):
    """The whole request in one write: the parser reads the trailer before the app reads
    the headers (QA228 F2: answered 200, charged to the key's tenant)."""
    head = _head(path).replace(b"POST", method.encode(), 1)
    answer = _exchange(gateway_port, head + (_chunk(body) if body else b"") + b"0\r\n"
                       + f"Authorization: Bearer {KEY}\r\n\r\n".encode())
    status, reply = _status_and_body(answer)
    assert status == 401, answer[:400]
    assert json.loads(reply)["error"]["code"] == "invalid_api_key"
    with_key = _head(path, f"Authorization: Bearer {KEY}\r\n").replace(b"POST", method.encode(), 1)
    answer = _exchange(gateway_port, with_key + (_chunk(body) if body else b"") + b"0\r\nX-Note: a trailer\r\n\r\n")
    assert _status_and_body(answer)[0] == 200, answer[:400]   # a small trailer: served


def test_trailer_fields_never_reach_the_app_as_headers(echo_port):
    answer = _exchange(echo_port, _head() + _chunk(b"{}") + b"0\r\nAuthorization: Bearer k\r\n"
                       b"X-Session-Id: from-trailer\r\n\r\n")
    status, body = _status_and_body(answer)
    assert status == 200 and json.loads(body)["body_bytes"] == 2
    assert json.loads(body)["headers"] == ["host", "content-type", "transfer-encoding", "connection"]


def _refused_431(answer: bytes) -> None:
    status, body = _status_and_body(answer)
    assert status == 431, answer[:400]
    error = json.loads(body)["error"]
    assert error["code"] == "request_header_fields_too_large" and "trailer section" in error["message"]
    assert answer.count(b"HTTP/1.1 ") == 1 and b"connection: close" in answer


def test_many_trailer_fields_past_the_limit_are_a_431_and_the_connection_closes(echo_port):
    fields = b"".join(b"X-Fill-%d: %s\r\n" % (n, b"a" * 1000) for n in range(MAX_HEAD_BYTES // 1000 + 10))
    kept = _head().replace(b"Connection: close\r\n", b"")
    then = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"   # never read: the connection closes
    _refused_431(_exchange(echo_port, kept + _chunk(b"{}") + b"0\r\n" + fields + b"\r\n" + then))


def test_one_endless_trailer_field_is_refused_as_it_comes(echo_port):
    """The parser keeps a field's bytes until it ends: measured read by read."""
    first = _head() + _chunk(b"{}") + b"0\r\nX-Fill: "
    _refused_431(_exchange(echo_port, first, [b"a" * 8192] * (4 * MAX_HEAD_BYTES // 8192)))


def test_a_trailer_section_just_within_the_limit_split_across_reads_is_served(echo_port):
    """Each measure is at most the section's size: a field spanning reads is not counted twice."""
    field = b"X-Fill: " + b"a" * (MAX_HEAD_BYTES - 200) + b"\r\n"
    answer = _exchange(echo_port, _head() + _chunk(b"{}") + b"0\r\n" + field[:1000],
                       [field[1000:30_000], field[30_000:], b"\r\n"], gap_s=0.05)
    assert _status_and_body(answer)[0] == 200, answer[:400]


def _cut_after_size_lines(body: bytes) -> list[bytes]:
    """`body` in 64 KiB chunks, each size line a read of its own, each chunk's data in odd pieces."""
    pieces = []
    for start in range(0, len(body), 65536):
        data = body[start:start + 65536] + b"\r\n"
        pieces.append(b"%x\r\n" % (len(data) - 2))   # a read ending right after a chunk's size line
        pieces += [data[at:at + 7919] for at in range(0, len(data), 7919)]
    return pieces + [b"0\r\n\r\n"]


def _cut_every(size: int):
    def cut(body: bytes) -> list[bytes]:
        stream = b"".join(_chunk(body[start:start + 65536]) for start in range(0, len(body), 65536)) + b"0\r\n\r\n"
        return [stream[at:at + size] for at in range(0, len(stream), size)]
    return cut


@pytest.mark.parametrize("cut", [_cut_after_size_lines, _cut_every(9973), _cut_every(3)],
                         ids=["after-size-lines", "every-9973-bytes", "every-3-bytes-at-the-end"])
def test_a_chunked_upload_in_reads_of_odd_sizes_is_served(echo_port, cut):
    """A read may end right after a chunk's size line (its data comes in the next read):
    that is body, never taken for trailer bytes."""
    body = bytes(range(256)) * 4096   # 1 MiB
    pieces = cut(body)
    if len(pieces) > 1000:   # (3-byte reads: only the last 200, where the last chunk and its end are)
        pieces = [b"".join(pieces[:-200]), *pieces[-200:]]
    answer = _exchange(echo_port, _head(), pieces, gap_s=0.002)
    status, reply = _status_and_body(answer)
    assert status == 200, answer[:400]
    assert json.loads(reply)["body_bytes"] == len(body)
    assert json.loads(reply)["sha256"] == hashlib.sha256(body).hexdigest()
