"""A background Responses POST answers `queued` before its run takes its share of the
tenant's per-minute limits; its `x-ratelimit-remaining-*` count that share as taken, as a
foreground answer's do (QA142: the remaining requests did not count the POST itself)."""
from __future__ import annotations

import time

import httpx
import pytest

from tests.gateway.test_background_responses import FINAL

KEY = "sk-background-rate-headers"
REQUESTS_PER_MINUTE, TOKENS_PER_MINUTE = 5, 50_000


@pytest.fixture(scope="module")
def limited_gateway(fake_upstream):
    import os

    from gateway.app import build_app
    from gateway.config import key_digest, parse_config
    from tests.conftest import ServedGateway
    from tests.gateway.serving import start_server

    os.environ["STEPAHEAD_TEST_FAKE_KEY"] = "sk-upstream-secret"
    app = build_app(parse_config({
        "server": {"responses_db": ":memory:"},
        "models": [{"name": "fake", "kind": "upstream", "litellm_model": "openai/fake-model",
                    "api_base": f"{fake_upstream.base_url}/v1", "api_key_env": "STEPAHEAD_TEST_FAKE_KEY"}],
        "tenants": [{"name": "limited", "api_key_sha256": [key_digest(KEY)],
                     "limits": {"requests_per_minute": REQUESTS_PER_MINUTE, "tokens_per_minute": TOKENS_PER_MINUTE}}]}))
    server = start_server(app)
    yield ServedGateway(server, app)
    server.stop()


def post(gateway, **fields) -> httpx.Response:
    return httpx.post(f"{gateway.base_url}/v1/responses", timeout=60, headers={"Authorization": f"Bearer {KEY}"},
                      json={"model": "fake", "input": "Say hi.", "max_output_tokens": 16, **fields})


def test_a_queued_background_answer_counts_its_own_request_and_tokens(limited_gateway):
    queued = post(limited_gateway, background=True)
    assert queued.status_code == 200, queued.text
    limiter = limited_gateway.state.limiters["limited"]
    assert queued.headers["x-ratelimit-remaining-requests"] == str(REQUESTS_PER_MINUTE - 1)
    assert int(queued.headers["x-ratelimit-remaining-tokens"]) <= TOKENS_PER_MINUTE - 16   # its output reserved at least
    deadline_s = time.monotonic() + 60
    while httpx.get(f"{limited_gateway.base_url}/v1/responses/{queued.json()['id']}", timeout=30,
                    headers={"Authorization": f"Bearer {KEY}"}).json()["status"] not in FINAL:
        assert time.monotonic() < deadline_s
        time.sleep(0.05)
    foreground = post(limited_gateway)
    assert foreground.status_code == 200, foreground.text
    assert foreground.headers["x-ratelimit-remaining-requests"] == str(REQUESTS_PER_MINUTE - 2)   # the run took one
    assert limiter.num_active == 0
