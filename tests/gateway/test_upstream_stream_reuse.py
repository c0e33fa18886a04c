"""The request after a long litellm stream to the same upstream is served, not failed at once
with a 504 `upstream_timeout` ("time taken=0.0 seconds", QA147): aiohttp restarted the read
timer of the stream's connection after giving it back to the pool (the gateway read the
stream more slowly than the upstream sent it, so the body's end was parsed by the read that
resumed reading), and `timeout_s` later the pooled connection held a read timeout that the
next request raised (gateway/upstream_stream_reuse.py). The upstream is a raw socket
server, so the bytes of each read are the test's: the stream's body ends inside the read
that passes aiohttp's high-water mark, while the gateway is not reading."""
import asyncio
import json
import os
import socket
import threading
import time

import aiohttp
import pytest
from aiohttp.client_proto import ResponseHandler
from aiohttp.helpers import DEFAULT_CHUNK_SIZE

from gateway.backend import Finished, TextDelta
from gateway.config import UpstreamModelConfig
from gateway.passthrough import MAX_EVENT_BYTES, PassthroughBackend
from gateway.schemas import ChatCompletionRequest, validate
from gateway.upstream import UpstreamBackend
from gateway.upstream_stream_reuse import _disarm, aiohttp_reply_of

KEY_ENV = "STEPAHEAD_TEST_STREAM_REUSE_KEY"
TIMEOUT_S = 1.0
# a path, and the buffered bytes past which aiohttp pauses its reading (twice `read_bufsize`:
# aiohttp's default under litellm)
PATHS = [("lite", 2 * DEFAULT_CHUNK_SIZE), ("pass", MAX_EVENT_BYTES)]
USAGE = {"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12}


def _sse(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _chunk(delta: dict, finish: str | None = None) -> bytes:
    return _sse({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "fake",
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def _http_chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


WORD = _chunk({"content": "w"})
WHOLE = json.dumps({"id": "x", "object": "chat.completion", "created": 1, "model": "fake",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "served"},
                                 "finish_reason": "stop"}], "usage": USAGE}).encode()


class PacedUpstream:
    """A keep-alive OpenAI-style upstream on a raw socket. A stream request gets its first
    chunk, then (once `go` is set) a body 16 KiB under aiohttp's high-water mark
    (`high_water_bytes`), then, 0.3 s later, in one send, the body's last 32 KiB, its end
    (finish, usage, `[DONE]`) and the chunked encoding's end. A whole request gets a whole
    reply. `connections` counts the connections the gateway opened.

    Invariant: nothing of it outlives `close()` to print during a later test: it shuts the
    listener and every connection (a closed listener alone leaves `accept` blocked, and the
    client's pool keeps its connections open), lets a stream held for `go` end, and joins
    its threads; a connection that fails under them ends quietly (no thread's traceback on
    sys.stderr)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.go = threading.Event()
        self.closed = threading.Event()
        self.connections = 0
        self.high_water_bytes = 2 * DEFAULT_CHUNK_SIZE
        self._accepted: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._start(self._accept)

    def _start(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:   # shut at the module's end
                return
            self.connections += 1
            self._accepted.append(conn)
            self._start(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                self._answer(conn)
            except OSError:   # the client left, or `close()` shut the connection
                pass

    def _answer(self, conn: socket.socket) -> None:
        pending = b""
        while True:
            while b"\r\n\r\n" not in pending:
                data = conn.recv(65536)
                if not data:
                    return
                pending += data
            head, pending = pending.split(b"\r\n\r\n", 1)
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            while len(pending) < length:
                data = conn.recv(65536)
                if not data:
                    return
                pending += data
            body, pending = json.loads(pending[:length]), pending[length:]
            if body.get("stream"):
                self._stream(conn)
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n" % len(WHOLE) + WHOLE)

    def _stream(self, conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + _http_chunk(_chunk({"role": "assistant", "content": "a"})))
        self.go.wait(30)
        self.go.clear()
        if self.closed.is_set():
            return
        conn.sendall(_http_chunk(WORD * ((self.high_water_bytes - 16 * 1024) // len(WORD))))
        time.sleep(0.3)
        end = WORD * (32 * 1024 // len(WORD)) + _chunk({}, "stop") + _sse(
            {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "fake", "choices": [],
             "usage": USAGE}) + b"data: [DONE]\n\n"
        conn.sendall(_http_chunk(end) + b"0\r\n\r\n")

    def close(self) -> None:
        self.closed.set()
        self.go.set()   # a stream held for it ends at once
        for sock in (self.listener, *self._accepted):
            try:
                sock.shutdown(socket.SHUT_RDWR)   # wakes the `accept` or `recv` blocked on it
            except OSError:   # closed already
                pass
        self.listener.close()
        for thread in self._threads:
            thread.join(10)


@pytest.fixture(scope="module")
def upstream():
    os.environ.setdefault(KEY_ENV, "sk-upstream-secret")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    server = PacedUpstream()
    yield server
    server.close()


def _request(path: str, stream: bool):
    return validate(ChatCompletionRequest, {"model": path, "messages": [{"role": "user", "content": "hi"}],
                                            "stream": stream})


@pytest.mark.parametrize("path, high_water_bytes", PATHS)
def test_the_request_after_a_long_slowly_read_stream_is_served(upstream, path, high_water_bytes):
    upstream.high_water_bytes = high_water_bytes
    connections_before = upstream.connections

    async def run():
        config = UpstreamModelConfig(name=path, litellm_model="openai/fake-model",
                                     api_base=f"http://127.0.0.1:{upstream.port}/v1", api_key_env=KEY_ENV,
                                     timeout_s=TIMEOUT_S, passthrough=path == "pass")
        backend = (PassthroughBackend if path == "pass" else UpstreamBackend)(config)
        await backend.start()
        streamed: list = []
        async for event in backend.run(await backend.prepare_chat(_request(path, True), "t", "req-1")):
            streamed.append(event)
            if len(streamed) == 1:   # the gateway falls behind: the whole rest arrives unread
                upstream.go.set()
                await asyncio.sleep(1.0)
        await asyncio.sleep(TIMEOUT_S + 0.5)   # past the timer restarted at the body's end
        started_s = time.perf_counter()
        try:
            served = [event async for event in backend.run(await backend.prepare_chat(_request(path, False), "t",
                                                                                      "req-2"))]
            error = None
        except Exception as exc:   # the test looks at what escaped
            served, error = [], exc
        finally:
            await backend.stop()
        return streamed, served, error, time.perf_counter() - started_s

    streamed, served, error, took_s = asyncio.run(run())
    assert isinstance(streamed[-1], Finished) and streamed[-1].usage.num_completion_tokens == 9
    num_words = (high_water_bytes - 16 * 1024) // len(WORD) + 32 * 1024 // len(WORD)
    assert "".join(event.text for event in streamed if isinstance(event, TextDelta)) == "a" + "w" * num_words
    assert error is None, f"{error!r} after {took_s:.2f} s"   # QA147: a 504 upstream_timeout at once
    assert served[0] == TextDelta("served", None) and served[-1].finish_reason == "stop"
    assert upstream.connections == connections_before + 1   # the stream's connection stayed pooled, and served


def test_a_timer_is_cancelled_only_on_a_connection_no_new_request_took():
    async def run():
        protocol = ResponseHandler(asyncio.get_running_loop())
        protocol.set_response_params(read_timeout=30.0)
        streamed_parser = protocol._parser
        protocol.start_timeout()   # restarted after the stream's body ended
        _disarm(protocol, streamed_parser)
        stale_cancelled = protocol._read_timeout_handle is None
        protocol.set_response_params(read_timeout=30.0)   # a new request took the connection
        protocol.start_timeout()
        _disarm(protocol, streamed_parser)
        own_kept = protocol._read_timeout_handle is not None
        protocol._drop_timeout()
        return stale_cancelled, own_kept

    assert asyncio.run(run()) == (True, True)


def test_a_stream_of_another_shape_is_left_as_it_is():
    assert aiohttp_reply_of(object()) is None
    assert aiohttp_reply_of(aiohttp) is None


def _paced_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.endswith(("(_accept)", "(_serve)"))}


def test_the_paced_upstream_leaves_no_thread_after_close_even_with_a_stream_held(capsys):
    """Its threads once outlived the module: `accept` stayed blocked on the closed listener,
    and a stream held for `go` would have woken 30 s later, in another test, to write to a
    connection gone by then (a thread's traceback on that test's stderr)."""
    before = _paced_threads()
    server = PacedUpstream()
    body = json.dumps({"model": "fake", "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as client:
        client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                       % (len(body), body))
        assert client.recv(65536).startswith(b"HTTP/1.1 200 OK")   # the stream's first chunk: now held
        server.close()
        deadline_s = time.monotonic() + 5
        while _paced_threads() - before:
            assert time.monotonic() < deadline_s, "a thread of the upstream outlived close()"
            time.sleep(0.02)
    assert capsys.readouterr().err == ""
