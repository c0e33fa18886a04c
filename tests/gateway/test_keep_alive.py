"""An idle client connection outlives uvicorn's default 5 s keep-alive.

Clients keep idle connections longer than 5 s (aiohttp 15 s), so with uvicorn's default
a request could be sent on a connection the server was closing that instant and fail
with no reply ("Server disconnected"; seen twice in a 239-request replay). The gateway
keeps idle connections `keep_alive_s` (75 s by default)."""
from __future__ import annotations

import http.client
import time


def test_a_connection_idle_past_uvicorns_default_five_seconds_still_serves(gateway):
    port = int(gateway.base_url.rsplit(":", 1)[1].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/health")
        first = conn.getresponse()
        first.read()
        sock = conn.sock
        # past uvicorn's default timeout_keep_alive of 5 s, counted from before the answer was read
        time.sleep(5.25)
        conn.request("GET", "/health")  # http.client does not reconnect on its own
        second = conn.getresponse()
        second.read()
        assert (first.status, second.status) == (200, 200)
        assert conn.sock is sock  # the same connection served both
    finally:
        conn.close()
