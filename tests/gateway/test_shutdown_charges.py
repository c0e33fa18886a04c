"""A request the gateway's shutdown cuts before its reply was whole charges its tenant
nothing: not its `token_budget` (the spent tokens file neither) nor its tokens per minute.
Its client is told to retry it (`server_shutting_down`), and the retry pays for the whole
reply; the tokens the model generated still count as work done in the metrics."""
from __future__ import annotations

import json
import threading

import httpx
import pytest

from gateway.app import build_app
from gateway.config import key_digest, parse_config
from gateway.spent_tokens import SpentTokens
from tests.gateway.serving import start_server

LIMITS = {"token_budget": 1_000_000, "tokens_per_minute": 100_000}
HEADERS = {"Authorization": "Bearer sk-t"}


def _start(tmp_path, monkeypatch, model: dict):
    monkeypatch.setenv("STEPAHEAD_SPENT_TOKENS", str(tmp_path / "spent.json"))
    config = parse_config({
        "tracing": {"store_path": str(tmp_path / "traces.sqlite")},
        "models": [model],
        "tenants": [{"name": "t", "api_key_sha256": [key_digest("sk-t")], "limits": LIMITS}]})
    app = build_app(config)
    return app, start_server(app, startup_timeout_s=300, shutdown_timeout_s=0.5)


def _stop(server) -> None:
    server.server.should_exit = True
    server.thread.join(30)


def _cut_whole(server, body: dict, after_s: float) -> httpx.Response:
    """`body` asked for a whole reply; the server is told to stop `after_s` later."""
    threading.Timer(after_s, lambda: setattr(server.server, "should_exit", True)).start()
    try:
        return httpx.post(f"{server.base_url}/v1/chat/completions", json=body, headers=HEADERS, timeout=60)
    finally:
        _stop(server)


def _cut_stream(server, body: dict) -> list[str]:
    """`body` streamed; the server is told to stop once its first content chunk is read."""
    lines: list[str] = []
    try:
        with httpx.stream("POST", f"{server.base_url}/v1/chat/completions", json=body, headers=HEADERS,
                          timeout=60) as reply:
            assert reply.status_code == 200
            for line in reply.iter_lines():
                lines.append(line)
                if '"content": "echo' in line or '"content":"echo' in line:
                    server.server.should_exit = True
    finally:
        _stop(server)
    return lines


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_cut_at_shutdown_charges_neither_the_budget_nor_the_tokens_per_minute(
        fake_upstream, monkeypatch, tmp_path, stream):
    monkeypatch.setenv("STEPAHEAD_TEST_FAKE_KEY", "sk-upstream-secret")
    app, server = _start(tmp_path, monkeypatch, {
        "name": "fake", "kind": "upstream", "litellm_model": "openai/fake-model",
        "api_base": f"{fake_upstream.base_url}/v1", "api_key_env": "STEPAHEAD_TEST_FAKE_KEY"})
    limiter = app.state.gateway.limiters["t"]
    answered = httpx.post(f"{server.base_url}/v1/chat/completions", headers=HEADERS, timeout=30,
                          json={"model": "fake", "messages": [{"role": "user", "content": "hi"}]})
    assert answered.status_code == 200, answered.text
    spent = limiter.num_spent_tokens
    assert spent == answered.json()["usage"]["total_tokens"] > 0   # an answered request is charged
    remaining = int(limiter.rate_limit_headers()["x-ratelimit-remaining-tokens"])
    body = {"model": "fake", "max_tokens": 4000, "stream": stream, "messages": [{"role": "user", "content": "slow"}]}
    if stream:
        lines = _cut_stream(server, body)
        last = json.loads(lines[-1].removeprefix("data: ") if lines[-1] else lines[-2].removeprefix("data: "))
        assert last["error"]["code"] == "server_shutting_down"
        assert any('"content": "echo' in line or '"content":"echo' in line for line in lines)   # read part of it
    else:
        cut = _cut_whole(server, body, 0.5)
        assert cut.status_code == 503 and cut.json()["error"]["code"] == "server_shutting_down", cut.text
        # QA137: the 503 names the step it was traced as and its session, as every answer does
        assert cut.headers.get("x-request-id", "").startswith("chatcmpl-") and cut.headers.get("x-session-id")
        assert "x-ratelimit-remaining-tokens" in cut.headers and cut.headers["retry-after"] == "1"
    assert limiter.num_active == 0   # the slot was given back
    assert limiter.num_spent_tokens == spent, "the cut request was charged"
    assert int(limiter.rate_limit_headers()["x-ratelimit-remaining-tokens"]) >= remaining   # given back
    assert SpentTokens.load(tmp_path / "spent.json").counts == {"t": spent}   # the file the restart reads
    assert 'status="503"' in app.state.gateway.metrics.render()


def test_a_local_reply_cut_at_shutdown_charges_nothing_but_its_tokens_count_as_work(monkeypatch, tmp_path):
    from tests.gateway.test_metrics_cut_requests import _sums

    app, server = _start(tmp_path, monkeypatch, {"name": "tiny", "kind": "local", "path": "tiny",
                                                 "num_workers": 1})
    limiter, metrics = app.state.gateway.limiters["t"], app.state.gateway.metrics
    body = {"model": "tiny", "max_tokens": 4000, "ignore_eos": True,
            "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]}
    cut = _cut_whole(server, body, 1.5)
    assert cut.status_code == 503 and cut.json()["error"]["code"] == "server_shutting_down", cut.text
    work = _sums(metrics.render(), "t")
    assert work.get("vllm:generation_tokens", 0) > 0 and work.get("vllm:prompt_tokens", 0) > 0
    assert limiter.num_spent_tokens == 0, "the cut reply was charged"
    assert SpentTokens.load(tmp_path / "spent.json").counts.get("t", 0) == 0
