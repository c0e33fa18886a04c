"""A cancel sent to a gateway that does not run the background response (QA189: two
gateways sharing one responses file; `POST /v1/responses/{id}/cancel` to the one that did
not start it was a 400 nobody explained)."""
from __future__ import annotations

import httpx

from tests.gateway.conftest import KEYS


def _gateway(fake_upstream, database):
    from gateway.app import build_app
    from gateway.config import key_digest, parse_config
    from tests.gateway.serving import start_server

    return start_server(build_app(parse_config({
        "server": {"responses_db": str(database)},
        "models": [{"name": "fake", "kind": "upstream", "litellm_model": "openai/fake-model",
                    "api_base": f"{fake_upstream.base_url}/v1", "api_key_env": "STEPAHEAD_TEST_FAKE_KEY"}],
        "tenants": [{"name": "alpha", "api_key_sha256": [key_digest(KEYS["alpha"])]}]})))


def test_a_cancel_sent_to_another_gateway_sharing_the_file_says_where_the_run_is_and_changes_nothing(
        fake_upstream, monkeypatch, tmp_path):
    """Only the gateway running a background response can stop it (its task is in that
    process): another gateway sharing the file answers a 400 saying so (true: the row's
    owner lives, `response_store`), and the run goes on; once it is cancelled where it
    runs, a cancel through either answers it `cancelled` (OpenAI: cancelling a cancelled
    response again answers the same)."""
    monkeypatch.setenv("STEPAHEAD_TEST_FAKE_KEY", "sk-upstream-secret")
    database = tmp_path / "responses.sqlite3"
    running, other = _gateway(fake_upstream, database), _gateway(fake_upstream, database)
    headers = {"Authorization": f"Bearer {KEYS['alpha']}"}
    try:
        started = httpx.post(f"{running.base_url}/v1/responses", headers=headers,
                             json={"model": "fake", "input": "hang", "background": True}).json()
        there = f"{other.base_url}/v1/responses/{started['id']}"
        answer = httpx.post(f"{there}/cancel", headers=headers)
        assert answer.status_code == 400
        assert answer.json()["error"] == {
            "message": f"Response '{started['id']}' runs in another gateway sharing this one's responses file; "
                       "cancel it there.", "type": "invalid_request_error", "param": "response_id",
            "code": "invalid_value"}
        assert httpx.get(there, headers=headers).json()["status"] in ("queued", "in_progress")   # still running
        cancelled = httpx.post(f"{running.base_url}/v1/responses/{started['id']}/cancel", headers=headers)
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        again = httpx.post(f"{there}/cancel", headers=headers)
        assert again.status_code == 200 and again.json() == cancelled.json()
    finally:
        running.stop()
        other.stop()
