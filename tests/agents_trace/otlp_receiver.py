"""A local OTLP/HTTP collector for the tests: it decodes each export it is sent (spans to
`/v1/traces`, metrics to `/v1/metrics`) and keeps the requests by path."""
from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

MESSAGES = {"/v1/traces": (trace_service_pb2.ExportTraceServiceRequest, trace_service_pb2.ExportTraceServiceResponse),
            "/v1/metrics": (metrics_service_pb2.ExportMetricsServiceRequest,
                            metrics_service_pb2.ExportMetricsServiceResponse)}


@dataclass
class Collected:
    """The export requests a receiver decoded, by path, in arrival order."""

    requests: dict[str, list] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, path: str, request) -> None:
        with self.lock:
            self.requests.setdefault(path, []).append(request)

    def of(self, path: str) -> list:
        with self.lock:
            return list(self.requests.get(path, ()))

    @property
    def spans(self) -> list:
        return [span for request in self.of("/v1/traces") for resource in request.resource_spans
                for scope in resource.scope_spans for span in scope.spans]


def http_receiver(collected: Collected) -> ThreadingHTTPServer:
    """A receiver on 127.0.0.1 (a free port; `server.server_address[1]`), serving in a daemon
    thread until `server.shutdown()`; another path than the signals' is answered 404."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the http.server API
            body = self.rfile.read(int(self.headers["content-length"]))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            request_type, response_type = MESSAGES.get(self.path, MESSAGES["/v1/traces"])
            request = request_type()
            request.ParseFromString(body)
            collected.add(self.path, request)
            reply = response_type().SerializeToString()
            self.send_response(200 if self.path in MESSAGES else 404)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
