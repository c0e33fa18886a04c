"""The gateway's trace routes over a damaged trace store: a 503 saying why, never a 500,
and a new store once the writer has checked the damage the reader reported."""
from __future__ import annotations

import time

import httpx

from gateway.app import build_app
from gateway.config import key_digest, parse_config
from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session
from tests.cache.test_damaged_files import damage_pages
from tests.gateway.serving import start_server

KEY = "sk-trace-damage"


def test_a_damaged_trace_store_is_a_503_then_set_aside_and_served_anew(tmp_path):
    clock = ManualClock(time.time())   # recent: the gateway's retention leaves the session alone
    tracer, _ = make_tracer(tmp_path, clock)   # a store with a session in it, then damaged
    session = run_scripted_session(tracer, clock, tenant="acme")[0].session
    tracer.stop()
    damage_pages(tracer.store_path, table="steps")   # what the session's page reads, not the start
    config = parse_config({
        "models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                    "litellm_params": {"mock_response": "hi"}}],
        "tenants": [{"name": "acme", "api_key_sha256": [key_digest(KEY)], "admin": True}],
        "tracing": {"store_path": str(tracer.store_path)},
    })
    server = start_server(build_app(config))
    try:
        url, headers = f"{server.base_url}/v1/traces/sessions/{session}", {"authorization": f"Bearer {KEY}"}
        first = httpx.get(url, headers=headers, timeout=30)
        assert first.status_code == 503, first.text
        error = first.json()["error"]
        assert error["code"] == "trace_store_unavailable" and error["type"] == "server_error"
        assert "could not be read (database disk image is malformed)" in error["message"]
        assert first.headers["retry-after"] == "1"
        deadline_s = time.monotonic() + 30
        while (again := httpx.get(url, headers=headers, timeout=30)).status_code == 503:
            assert time.monotonic() < deadline_s, "the damaged store was not set aside"
            time.sleep(0.1)
        assert again.status_code == 404, again.text   # a new store, without the session
        listed = httpx.get(f"{server.base_url}/v1/traces/sessions", headers=headers, timeout=30)
        assert listed.status_code == 200 and listed.json()["data"] == []
        assert len(list(tmp_path.glob("traces.sqlite3.damaged-*[0-9]Z"))) == 1
        metrics = httpx.get(f"{server.base_url}/metrics", headers=headers, timeout=30).text
        assert "\nstepahead_trace_stores_set_aside_total 1\n" in metrics
    finally:
        server.stop()
