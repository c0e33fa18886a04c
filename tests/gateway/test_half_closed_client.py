"""A client that half-closes its connection (shutdown(SHUT_WR), `nc -N`) after sending a
whole request is answered, and the connection then closed at once (QA150: uvicorn closed
it with no answer, counted 499); one that half-closes in the middle of its request is
closed with no answer, as before. Through `stepahead serve`'s protocol (`served`)."""
from __future__ import annotations

import json
import socket
import time

from tests.gateway.test_http_edges import KEY, served, serve_options  # noqa: F401 — fixtures


def _half_closed_exchange(port: int, data: bytes) -> tuple[bytes, float]:
    """Everything sent back to `data` followed by the client's end, and how long until
    the server closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        began, answer = time.monotonic(), b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer, time.monotonic() - began


def _chat(stream: bool) -> bytes:
    body = json.dumps({"model": "mock", "messages": [{"role": "user", "content": "hi"}], "stream": stream}).encode()
    return (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def test_a_whole_request_then_the_clients_end_is_answered_then_closed(served):
    whole, closed_after_s = _half_closed_exchange(served, _chat(stream=False))
    head, _, body = whole.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), whole[:300]
    assert json.loads(body)["choices"][0]["message"]["content"] == "hi"
    assert closed_after_s < 10   # not the keep-alive wait
    streamed, _ = _half_closed_exchange(served, _chat(stream=True))
    assert streamed.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in streamed, streamed[:300]


def test_the_clients_end_in_the_middle_of_its_request_closes_with_no_answer(served):
    cut_body, _ = _half_closed_exchange(served, _chat(stream=False)[:-5])
    assert cut_body == b""
    cut_head, _ = _half_closed_exchange(served, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
    assert cut_head == b""
