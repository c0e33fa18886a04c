"""A request body that trickles in, or stops, is bounded in time (`[server] body_timeout_s`,
FI70; QA163: 71 stalled uploads held their tenant's `file_bytes_per_tenant` reservation
forever): a body that sends nothing for that long is a 408 `request_timeout` in OpenAI's
shape and its connection is closed; a stalled upload's reservation is released and nothing
of it is kept; a slow body whose pieces keep coming passes, however long it takes in all."""
from __future__ import annotations

import json
import socket
import time

import pytest

from gateway.app import build_app
from gateway.config import ConfigError, key_digest, parse_config

from tests.gateway.serving import start_server

KEY = "k-body-timeout"
TIMEOUT_S = 0.3
BOUNDARY = "fi70"


def _config(tmp_path, **server):
    return parse_config({"models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                                     "litellm_params": {"mock_response": "hi"}}],
                         "tenants": [{"name": "a", "api_key_sha256": [key_digest(KEY)]}],
                         "tracing": {"enabled": False},
                         "server": {"responses_db": str(tmp_path / "responses.sqlite3"), **server}})


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The gateway (body_timeout_s 0.3) under uvicorn as `stepahead serve` runs it: its app and port."""
    root = tmp_path_factory.mktemp("body-timeout")
    app = build_app(_config(root, body_timeout_s=TIMEOUT_S))
    server = start_server(app)
    yield app, server.port, root / "files"
    server.stop()


def _head(path: str, content_type: str, length: int) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def _answer(sock: socket.socket, closing: bool = True) -> tuple[int, dict[str, str], bytes, bool]:
    """Status, headers, body of the answer on `sock`, and (when `closing`) whether the server
    closed the connection after it, within the socket's timeout."""
    answer = b""
    while b"\r\n\r\n" not in answer and (chunk := sock.recv(65536)):
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)) and (chunk := sock.recv(65536)):
        body += chunk
    try:
        closed = closing and sock.recv(65536) == b""
    except TimeoutError:
        closed = False
    return int(lines[0].split()[1]), headers, body, closed


def _timed_out_shape(status: int, body: bytes) -> None:
    assert status == 408, (status, body)
    error = json.loads(body)["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "request_timeout")
    assert "body_timeout_s" in error["message"] and "0.3 s" in error["message"]


def _multipart(data: bytes) -> bytes:
    return (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="f.txt"\r\n\r\n').encode() \
        + data + f"\r\n--{BOUNDARY}--\r\n".encode()


def _listed(app, port: int) -> list:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(f"GET /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                     "Connection: close\r\n\r\n".encode())
        status, _, body, _ = _answer(sock)
    assert status == 200, body
    return json.loads(body)["data"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/conversations"])   # the fast path, a plain route
def test_a_json_body_that_stops_halfway_is_a_408_within_the_timeout_and_its_connection_closed(served, path):
    _, port, _ = served
    body = json.dumps({"model": "mock", "messages": [{"role": "user", "content": "hi"}]}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(_head(path, "application/json", len(body)) + body[:len(body) // 2])
        started_s = time.monotonic()
        status, headers, answer, closed = _answer(sock)
        waited_s = time.monotonic() - started_s
    _timed_out_shape(status, answer)
    assert TIMEOUT_S * 0.8 <= waited_s < TIMEOUT_S + 2.0, waited_s
    assert headers.get("connection") == "close" and closed
    assert headers.get("x-request-id", "").startswith(("req", "chatcmpl"))   # as every answer under /v1/


def test_a_stalled_upload_is_a_408_its_reservation_released_and_nothing_of_it_kept(served):
    app, port, files_dir = served
    uploads = app.state.gateway.files.uploads
    body = _multipart(b"x" * 200_000)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(_head("/v1/files", f"multipart/form-data; boundary={BOUNDARY}", len(body)) + body[:100_000])
        deadline_s = time.monotonic() + TIMEOUT_S * 0.7
        while uploads.held("a") != len(body) and time.monotonic() < deadline_s:
            time.sleep(0.01)
        assert uploads.held("a") == len(body)   # while it stalls, its declared bytes are reserved
        status, headers, answer, closed = _answer(sock)
    _timed_out_shape(status, answer)
    assert headers.get("connection") == "close" and closed
    assert uploads.held("a") == 0
    assert _listed(app, port) == []
    assert not files_dir.exists() or [path.name for path in files_dir.iterdir() if path.name.startswith("file-")] == []


def _send_slowly(sock: socket.socket, data: bytes, pieces: int) -> float:
    """`data` in `pieces` pieces, one every 0.1 s (a third of the timeout); the seconds it took."""
    started_s = time.monotonic()
    size = -(-len(data) // pieces)
    for start in range(0, len(data), size):
        sock.sendall(data[start:start + size])
        time.sleep(0.1)
    return time.monotonic() - started_s


def test_a_slow_but_steady_body_passes_however_long_it_takes_in_all(served):
    app, port, _ = served
    conversation = json.dumps({"metadata": {"topic": "slow"}}).encode()
    upload = _multipart(b"y" * 5_000)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(_head("/v1/conversations", "application/json", len(conversation)))
        took_s = _send_slowly(sock, conversation, 8)
        status, _, answer, _ = _answer(sock, closing=False)
        assert took_s > 2 * TIMEOUT_S and status == 200, (took_s, answer)
        assert json.loads(answer)["metadata"] == {"topic": "slow"}
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(_head("/v1/files", f"multipart/form-data; boundary={BOUNDARY}", len(upload)))
        took_s = _send_slowly(sock, upload, 8)
        status, _, answer, _ = _answer(sock, closing=False)
        assert took_s > 2 * TIMEOUT_S and status == 200, (took_s, answer)
    assert [file["id"] for file in _listed(app, port)] == [json.loads(answer)["id"]]
    assert app.state.gateway.files.uploads.held("a") == 0


def test_body_timeout_s_defaults_to_60_and_must_be_a_positive_number(tmp_path):
    assert _config(tmp_path).body_timeout_s == 60.0
    assert _config(tmp_path, body_timeout_s=5).body_timeout_s == 5.0
    for bad, says in ((0, "body_timeout_s must be > 0"), (-1, "body_timeout_s must be > 0"),
                      ("long", "body_timeout_s must be"), (True, "body_timeout_s must be")):
        with pytest.raises(ConfigError, match=says):
            _config(tmp_path, body_timeout_s=bad)
