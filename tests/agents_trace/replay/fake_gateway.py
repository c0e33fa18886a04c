"""A stand-in OpenAI-compatible gateway for replay CLI tests that need no model: it lists
one model, answers every POST with a one-chunk stream, and records the bodies it got.
`hold_s` keeps each answer back that long (a request still in flight), or until `stop()`.
`keys` (None: any key) are the keys its /v1/models answers; any other gets a 401, and
`model_lookups` records the key of every /v1/models request, in order.

Invariant: nothing of it outlives `stop()` to print on a later test's stderr: a held answer
is let go at once, and an answer whose client already left is dropped quietly (not
socketserver's traceback on sys.stderr, which a later test's capsys would read)."""
from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(slots=True)
class FakeGateway:
    server: ThreadingHTTPServer
    bodies: list[dict] = field(default_factory=list)
    hold_s: float = 0.0
    keys: frozenset[str] | None = None
    model_lookups: list[str] = field(default_factory=list)
    stopped: threading.Event = field(default_factory=threading.Event)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):   # the client left: nothing to tell
            super().handle_error(request, client_address)


def start_fake_gateway(hold_s: float = 0.0, keys: frozenset[str] | None = None) -> FakeGateway:
    gateway: FakeGateway

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args) -> None:
            pass

        def _send(self, content_type: str, payload: bytes, status: int = 200) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            key = self.headers.get("Authorization", "").removeprefix("Bearer ")
            gateway.model_lookups.append(key)
            if gateway.keys is not None and key not in gateway.keys:
                self._send("application/json", json.dumps({"error": {"message": "bad key"}}).encode(), 401)
                return
            self._send("application/json", json.dumps({"data": [{"id": "m"}]}).encode())

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            gateway.bodies.append(body)
            if gateway.stopped.wait(gateway.hold_s):
                return
            chunk = {"choices": [{"index": 0, "text": "x", "delta": {"content": "x"}, "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
            self._send("text/event-stream", f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())

    server = _QuietServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    gateway = FakeGateway(server, hold_s=hold_s, keys=keys)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return gateway
