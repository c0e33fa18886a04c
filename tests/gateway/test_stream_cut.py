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


def _gateway(fake_upstream, tmp_path, passthrough: bool = False):
    config = parse_config({
        "tracing": {"store_path": str(tmp_path / "traces.sqlite")},
        "models": [{"name": "fake", "kind": "upstream", "litellm_model": "openai/fake-model",
                    "api_base": f"{fake_upstream.base_url}/v1", "api_key_env": "STEPAHEAD_TEST_FAKE_KEY",
                    "passthrough": passthrough}],
        "tenants": [{"name": "t", "api_key_sha256": [key_digest("sk-t")]}]})
    app = build_app(config)
    return app, start_server(app, shutdown_timeout_s=0.3)


def _lines_until_the_cut(server, path: str, body: dict) -> list[str]:
    """The stream's lines; the server is told to stop once the first one is out."""
    lines = []
    try:
        with httpx.stream("POST", f"{server.base_url}{path}", timeout=30, json=body,
                          headers={"Authorization": "Bearer sk-t"}) as reply:
            assert reply.status_code == 200
            for line in reply.iter_lines():   # a whole body: httpx raises on one closed midway
                lines.append(line)
                if len(lines) == 1:
                    server.server.should_exit = True
    finally:
        server.server.should_exit = True
        server.thread.join(30)
    return lines


@pytest.mark.parametrize("passthrough", [False, True])
def test_a_stream_cut_by_the_shutdown_timeout_ends_with_an_error_event_and_a_whole_body(
        fake_upstream, monkeypatch, tmp_path, passthrough):
    monkeypatch.setenv("STEPAHEAD_TEST_FAKE_KEY", "sk-upstream-secret")
    app, server = _gateway(fake_upstream, tmp_path, passthrough)
    lines = _lines_until_the_cut(server, "/v1/chat/completions", {
        "model": "fake", "stream": True, "messages": [{"role": "user", "content": "slow"}]})
    events = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: {")]
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert events[-1] == {"error": {"message": "The gateway is shutting down and cut this stream before it "
                                               "finished; retry the request.", "type": "server_error",
                                    "param": None, "code": "server_shutting_down"}}
    assert "data: [DONE]" not in lines
    assert 'status="503"' in app.state.gateway.metrics.render()   # counted as the gateway's refusal


def test_a_background_responses_reader_cut_at_shutdown_reads_the_runs_end_or_an_error_numbered_as_its_next(
        fake_upstream, monkeypatch, tmp_path):
    monkeypatch.setenv("STEPAHEAD_TEST_FAKE_KEY", "sk-upstream-secret")
    _, server = _gateway(fake_upstream, tmp_path)
    lines = _lines_until_the_cut(server, "/v1/responses", {"model": "fake", "stream": True, "background": True,
                                                           "input": "slow"})
    events = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
    assert events[0]["type"] == "response.created"
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    last = events[-1]   # the run the stop ended (`response.failed`), or, were it still running, the cut's error
    if last["type"] == "response.failed":
        assert last["response"]["error"]["code"] == "server_error"
    else:
        assert (last["type"], last["code"]) == ("error", "server_shutting_down")
        assert last["message"].startswith("The gateway is shutting down and cut this stream; the background "
                                          "response stops with it and ends failed (GET /v1/responses/resp_")


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"model": "fake", "messages": [{"role": "user", "content": "slow"}]}),
    ("/v1/chat/completions", {"model": "fake", "stream": True, "messages": [{"role": "user", "content": "hang"}]}),
    ("/v1/responses", {"model": "fake", "input": "slow"}),   # through the full app, not the fast path
])
def test_a_request_cut_by_the_shutdown_timeout_before_its_answer_began_gets_an_openai_shaped_503(
        fake_upstream, monkeypatch, tmp_path, path, body):
    import threading

    monkeypatch.setenv("STEPAHEAD_TEST_FAKE_KEY", "sk-upstream-secret")
    app, server = _gateway(fake_upstream, tmp_path)
    threading.Timer(0.5, lambda: setattr(server.server, "should_exit", True)).start()
    try:
        reply = httpx.post(f"{server.base_url}{path}", timeout=30, json=body, headers={"Authorization": "Bearer sk-t"})
    finally:
        server.server.should_exit = True
        server.thread.join(30)
    assert reply.status_code == 503, reply.text
    assert reply.headers["content-type"] == "application/json" and reply.headers["retry-after"] == "1"
    assert reply.json() == {"error": {"message": "The gateway is shutting down and cut this request before it was "
                                                 "answered; retry the request.", "type": "server_error",
                                      "param": None, "code": "server_shutting_down"}}
    if path == "/v1/chat/completions":
        assert 'status="503"' in app.state.gateway.metrics.render()   # counted as the gateway's refusal
