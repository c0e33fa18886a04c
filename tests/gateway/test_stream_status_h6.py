"""A stream that fails after its 200 header counts the error's status in
`stepahead_requests_total`, not 200 (QA64): an operator's `status=~"5.."` alert sees a worker
that died under a begun stream and an upstream that broke off, as it sees the same failures
before the first token."""
from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from gateway.app import build_app
from gateway.backend import TextDelta
from gateway.config import key_digest, parse_config
from gateway.errors import ApiError, server_error
from gateway.upstream import UpstreamBackend

ADMIN = {"authorization": "Bearer k-ops"}
TENANT = {"authorization": "Bearer k-a"}
CHAT = {"model": "mock", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def _config():
    return parse_config({"models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                                     "litellm_params": {"mock_response": "hello there"}}],
                         "tenants": [{"name": "ops", "api_key_sha256": [key_digest("k-ops")], "admin": True},
                                     {"name": "a", "api_key_sha256": [key_digest("k-a")]}],
                         "tracing": {"enabled": False}})


@pytest.fixture
def client():
    with TestClient(build_app(_config())) as test_client:
        yield test_client


def _breaking_off(monkeypatch, error: ApiError) -> None:
    """The model's run sends a piece of the reply, then fails with `error`."""
    async def run(self, prepared):
        yield TextDelta("a piece ")
        raise error

    monkeypatch.setattr(UpstreamBackend, "run", run)


def _counted(client, endpoint: str) -> dict[str, int]:
    text = client.get("/metrics", headers=ADMIN).text
    found = re.findall(rf'stepahead_requests_total\{{tenant="a",model_name="mock",endpoint="{endpoint}",'
                       r'status="(\d+)"\} (\d+)', text)
    return {status: int(number) for status, number in found}


def _successes(client) -> int:
    text = client.get("/metrics", headers=ADMIN).text
    return sum(int(n) for n in re.findall(r'vllm:request_success_total\{tenant="a",[^}]*\} (\d+)', text))


def _stream(client, path: str, body: dict) -> tuple[int, str]:
    with client.stream("POST", path, json=body, headers=TENANT) as streamed:
        return streamed.status_code, streamed.read().decode()


def test_a_stream_that_ends_normally_counts_200(client):
    status, text = _stream(client, "/v1/chat/completions", CHAT)
    assert status == 200 and text.rstrip().endswith("data: [DONE]")
    assert _counted(client, "chat") == {"200": 1} and _successes(client) == 1


@pytest.mark.parametrize("error, counted", [
    (ApiError(502, "Upstream error: connection closed", "server_error", "upstream_error"), "502"),
    (server_error("The model worker failed: worker w0 died", code="worker_died"), "500"),
])
def test_a_chat_stream_that_fails_after_its_header_counts_the_errors_status(client, monkeypatch, error, counted):
    _breaking_off(monkeypatch, error)
    status, text = _stream(client, "/v1/chat/completions", CHAT)
    assert status == 200 and "a piece" in text and f'"code":"{error.code}"' in text   # the header was sent
    assert _counted(client, "chat") == {counted: 1}
    assert _successes(client) == 0


def test_a_responses_stream_ending_in_an_error_event_counts_the_errors_status(client, monkeypatch):
    _breaking_off(monkeypatch, ApiError(502, "Upstream error: connection closed", "server_error", "upstream_error"))
    status, text = _stream(client, "/v1/responses", {"model": "mock", "input": "hi", "stream": True})
    assert status == 200 and "event: response.failed" in text and "upstream_error" in text
    assert _counted(client, "responses") == {"502": 1}
    assert _successes(client) == 0
