from __future__ import annotations

from benchmarks.e2e_forecast_stream import GatewayStream
from cache.forecast_source import RequestSeen


class _Recorder:
    def __init__(self):
        self.seen = []

    def observe(self, request):
        self.seen.append(request)


def test_gateway_stream_hides_tool_names_and_tool_calls_but_keeps_starts():
    inner = _Recorder()
    stream = GatewayStream(inner)
    stream.observe(RequestSeen("t", "s", 0.0, "start", ("ls",), 3))
    stream.observe(RequestSeen("t", "s", 1.0, "tool:ls", (), 4))
    stream.observe(RequestSeen("t", "s", 5.0, "user", ("cat",), 5))
    assert [(r.after, r.tool_calls, r.t_s, r.num_blocks) for r in inner.seen] == [
        ("start", (), 0.0, 3), ("user", (), 1.0, 4), ("user", (), 5.0, 5)]
