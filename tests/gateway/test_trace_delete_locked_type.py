"""QA218 F7: the API's DELETE on a locked trace store answers 503 `trace_store_unavailable`
with the type the gateway's other 503s have (`server_error`), not `invalid_request_error`:
a 5xx is never "your request was invalid"."""
from __future__ import annotations

import sqlite3
import time
from contextlib import closing

import httpx

from agents_trace import store_delete
from gateway.app import build_app
from gateway.config import key_digest, parse_config
from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session
from tests.gateway.serving import start_server

KEY = "sk-trace-locked"


def test_a_delete_on_a_locked_store_is_a_server_error(tmp_path, monkeypatch):
    monkeypatch.setattr(store_delete, "BUSY_TIMEOUT_MS", 100)
    clock = ManualClock(time.time())
    tracer, _ = make_tracer(tmp_path, clock)
    session = run_scripted_session(tracer, clock, tenant="acme")[0].session
    tracer.stop()
    config = parse_config({
        "models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                    "litellm_params": {"mock_response": "hi"}}],
        "tenants": [{"name": "acme", "api_key_sha256": [key_digest(KEY)]}],
        "tracing": {"store_path": str(tracer.store_path)},
    })
    server = start_server(build_app(config))
    try:
        with closing(sqlite3.connect(tracer.store_path, isolation_level=None)) as locker:
            locker.execute("BEGIN IMMEDIATE")
            answer = httpx.delete(f"{server.base_url}/v1/traces/sessions/{session}",
                                  headers={"authorization": f"Bearer {KEY}"}, timeout=30)
            locker.execute("ROLLBACK")
        assert answer.status_code == 503, answer.text
        error = answer.json()["error"]
        assert error["code"] == "trace_store_unavailable" and error["type"] == "server_error"
        assert answer.headers["retry-after"] == "1"
    finally:
        server.stop()
