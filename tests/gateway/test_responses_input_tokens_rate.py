"""POST /v1/responses/input_tokens is one request of its tenant's `requests_per_minute`
(QA134 H6: it charged no limit, so a tenant could keep the tokenizer busy at will): past
the limit it is the usual 429 with `Retry-After`, and it takes no tokens."""
from __future__ import annotations

import httpx
import pytest

KEY = "sk-counted-input-tokens"


@pytest.fixture(scope="module")
def paced_gateway():
    from gateway.app import build_app
    from gateway.config import key_digest, parse_config
    from tests.conftest import ServedGateway
    from tests.gateway.serving import start_server

    app = build_app(parse_config({
        "models": [{"name": "tiny", "kind": "local", "path": "tiny", "num_workers": 1}],
        "tenants": [{"name": "counted", "api_key_sha256": [key_digest(KEY)],
                     "limits": {"requests_per_minute": 2, "tokens_per_minute": 5000}}]}))
    server = start_server(app, startup_timeout_s=300)
    yield ServedGateway(server, app)
    server.stop()


def count(gateway) -> httpx.Response:
    return httpx.post(f"{gateway.base_url}/v1/responses/input_tokens", timeout=60,
                      headers={"Authorization": f"Bearer {KEY}"}, json={"model": "tiny", "input": "Count me."})


def test_counting_input_tokens_takes_a_request_of_the_rate_and_no_tokens(paced_gateway):
    answers = [count(paced_gateway) for _ in range(3)]
    assert [answer.status_code for answer in answers] == [200, 200, 429], [answer.text for answer in answers]
    assert answers[0].json()["input_tokens"] > 0
    assert [answer.headers.get("x-ratelimit-remaining-requests") for answer in answers[:2]] == ["1", "0"]
    assert all(answer.headers.get("x-ratelimit-remaining-tokens") == "5000" for answer in answers)
    refused = answers[2]
    assert refused.json()["error"]["code"] == "rate_limit_exceeded" and int(refused.headers["retry-after"]) >= 1
    limiter = paced_gateway.state.limiters["counted"]
    assert (limiter.num_active, limiter.num_reserved_tokens, limiter.num_spent_tokens) == (0, 0, 0)
