"""A stream still running when the shutdown timeout passes (uvicorn's
`timeout_graceful_shutdown`, `[server] shutdown_timeout_s`): the client reads an
OpenAI-shaped error event and a whole body, not a connection closed mid-body."""
from __future__ import annotations

import json

import httpx
import pytest

from gateway.app import build_app
from gateway.config import key_digest, parse_config
from tests.gateway.serving import start_server


@pytest.mark.parametrize("passthrough", [False, True])
def test_a_stream_cut_by_the_shutdown_timeout_ends_with_an_error_event_and_a_whole_body(
        fake_upstream, monkeypatch, tmp_path, passthrough):
    monkeypatch.setenv("STEPAHEAD_TEST_FAKE_KEY", "sk-upstream-secret")
    config = parse_config({
        "tracing": {"store_path": str(tmp_path / "traces.sqlite")},
        "models": [{"name": "fake", "kind": "upstream", "litellm_model": "openai/fake-model",
                    "api_base": f"{fake_upstream.base_url}/v1", "api_key_env": "STEPAHEAD_TEST_FAKE_KEY",
                    "passthrough": passthrough}],
        "tenants": [{"name": "t", "api_key_sha256": [key_digest("sk-t")]}]})
    app = build_app(config)
    server = start_server(app, shutdown_timeout_s=0.3)
    lines = []
    try:
        with httpx.stream("POST", f"{server.base_url}/v1/chat/completions", timeout=30,
                          headers={"Authorization": "Bearer sk-t"},
                          json={"model": "fake", "stream": True,
                                "messages": [{"role": "user", "content": "slow"}]}) as reply:
            assert reply.status_code == 200
            for line in reply.iter_lines():   # a whole body: httpx raises on one closed midway
                lines.append(line)
                if len(lines) == 1:   # the first event is out: stop the server meanwhile
                    server.server.should_exit = True
    finally:
        server.server.should_exit = True
        server.thread.join(30)
    events = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: {")]
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert events[-1] == {"error": {"message": "The gateway is shutting down and cut this stream before it "
                                               "finished; retry the request.", "type": "server_error",
                                    "param": None, "code": "server_shutting_down"}}
    assert "data: [DONE]" not in lines
    assert 'status="503"' in app.state.gateway.metrics.render()   # counted as the gateway's refusal
