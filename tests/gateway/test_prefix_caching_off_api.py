"""Through the real gateway (uvicorn, the tiny model) with `[models.engine] prefix_caching =
false`: an agent session whose steps share a long prefix counts none of it as evicted, in
`/metrics` or in the trace API the viewer reads (QA80 F1)."""
from __future__ import annotations

import time

import httpx
import pytest

from agents_trace.store_stats import StatsWindow, tenant_stats
from gateway.app import build_app
from gateway.config import key_digest, parse_config

from tests.gateway.serving import start_server

KEY = "sk-fi9-nocache"
SYSTEM = {"role": "system", "content": "You plan evenings for busy people. " * 40}   # several 64-token blocks


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    store_path = tmp_path_factory.mktemp("fi9") / "traces.sqlite3"
    config = parse_config({
        "models": [{"name": "tiny", "kind": "local", "path": "tiny", "num_workers": 1,
                    "engine": {"prefix_caching": False}}],
        "tenants": [{"name": "acme", "api_key_sha256": [key_digest(KEY)]}],
        "tracing": {"store_path": str(store_path)}})
    app = build_app(config)
    server = start_server(app, startup_timeout_s=300)
    yield server, app, store_path
    server.stop()


def test_no_prefix_counts_as_evicted_with_prefix_caching_off(served):
    server, app, store_path = served
    headers = {"authorization": f"Bearer {KEY}", "x-session-id": "fi9-nocache"}
    for question in ("Dinner on Friday?", "And a film after?"):
        response = httpx.post(f"{server.base_url}/v1/chat/completions", headers=headers, timeout=120, json={
            "model": "tiny", "max_tokens": 2, "messages": [SYSTEM, {"role": "user", "content": question}]})
        assert response.status_code == 200
        assert response.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0   # the cache is off
    tracer = app.state.gateway.tracer
    deadline_s = time.monotonic() + 10.0
    while tracer.num_steps_in_flight() and time.monotonic() < deadline_s:
        time.sleep(0.01)
    assert tracer.flush(10.0)
    metrics = httpx.get(f"{server.base_url}/metrics", headers=headers, timeout=30).text
    counted = {name: sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith(name + "{"))
               for name in ("stepahead_prefix_from_previous_tokens_total", "stepahead_evicted_prefix_tokens_total")}
    assert counted == {"stepahead_prefix_from_previous_tokens_total": 0, "stepahead_evicted_prefix_tokens_total": 0}
    session = httpx.get(f"{server.base_url}/v1/traces/sessions/fi9-nocache", headers=headers, timeout=30).json()
    steps = session["steps"]["data"]
    assert [s["num_input_tokens"] > 4 * 64 for s in steps] == [True, True]
    assert [(s["prefix_from_previous_tokens"], s["evicted_prefix_tokens"]) for s in steps] == [(None, None)] * 2
    total = tenant_stats(store_path, StatsWindow())["total"]   # `stepahead traces stats`
    assert (total["evicted_prefix_tokens"], total["steps_with_evicted_prefix"]) == (0, 0)
