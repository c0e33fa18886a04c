"""Background responses against a small `responses_per_tenant` (3, as QA78's repro): one
still running is not pushed out by newer responses, its end is stored; a tenant may have
`responses_per_tenant - 1` unfinished at once (one more is a 429); and a GET of one the
store no longer has (deleted through another gateway sharing the file) never stops its
run. The upstream is the fake server's "hang" (no answer for 60 s), so a run stays
`in_progress` until it is cancelled, whatever the machine's speed."""
import os
import sqlite3

import httpx
import pytest

from tests.gateway.conftest import KEYS

TENANTS = ("alpha", "beta", "cancel")


@pytest.fixture(scope="module")
def small_store_gateway(fake_upstream, tmp_path_factory):
    from gateway.app import build_app
    from gateway.config import key_digest, parse_config
    from tests.conftest import ServedGateway
    from tests.gateway.serving import start_server

    os.environ["STEPAHEAD_TEST_FAKE_KEY"] = "sk-upstream-secret"
    database = tmp_path_factory.mktemp("fi3") / "responses.sqlite3"
    app = build_app(parse_config({
        "server": {"responses_db": str(database), "responses_per_tenant": 3},
        "models": [{"name": "fake", "kind": "upstream", "litellm_model": "openai/fake-model",
                    "api_base": f"{fake_upstream.base_url}/v1", "api_key_env": "STEPAHEAD_TEST_FAKE_KEY"}],
        "tenants": [{"name": name, "api_key_sha256": [key_digest(KEYS[name])]} for name in TENANTS]}))
    server = start_server(app)
    yield ServedGateway(server, app), database
    server.stop()


def _call(gateway, tenant: str, method: str, path: str, body: dict | None = None) -> httpx.Response:
    return httpx.request(method, f"{gateway.base_url}/v1/responses{path}", json=body, timeout=30,
                         headers={"Authorization": f"Bearer {KEYS[tenant]}"})


def _create(gateway, tenant: str, text: str, **fields) -> dict:
    reply = _call(gateway, tenant, "POST", "", {"model": "fake", "input": text, **fields})
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_a_running_response_outlives_newer_ones_and_its_end_is_stored(small_store_gateway):
    gateway, _ = small_store_gateway
    running = _create(gateway, "alpha", "hang", background=True)
    stored = [_create(gateway, "alpha", f"turn {index}")["id"] for index in range(3)]
    polled = _call(gateway, "alpha", "GET", f"/{running['id']}")
    assert polled.status_code == 200 and polled.json()["status"] in ("queued", "in_progress")
    assert [_call(gateway, "alpha", "GET", f"/{rid}").status_code for rid in stored] == [404, 200, 200]
    cancelled = _call(gateway, "alpha", "POST", f"/{running['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    after = _call(gateway, "alpha", "GET", f"/{running['id']}")
    assert after.status_code == 200 and after.json()["status"] == "cancelled"


def test_one_background_response_more_than_the_store_leaves_room_for_is_a_429(small_store_gateway):
    gateway, _ = small_store_gateway
    first, second = (_create(gateway, "beta", "hang", background=True) for _ in range(2))
    refused = _call(gateway, "beta", "POST", "", {"model": "fake", "input": "hang", "background": True})
    error = refused.json()["error"]
    assert refused.status_code == 429 and error["code"] == "rate_limit_exceeded"
    assert "responses_per_tenant" in error["message"] and refused.headers["retry-after"] == "1"
    assert _create(gateway, "alpha", "another tenant's")["status"] == "completed"
    assert _create(gateway, "beta", "not in the background")["status"] == "completed"
    for response in (first, second):   # both still there, and cancelled they make room again
        assert _call(gateway, "beta", "POST", f"/{response['id']}/cancel").json()["status"] == "cancelled"
    third = _create(gateway, "beta", "hang", background=True)
    assert _call(gateway, "beta", "POST", f"/{third['id']}/cancel").json()["status"] == "cancelled"


def test_a_get_of_a_response_deleted_elsewhere_is_a_404_and_leaves_its_run_going(small_store_gateway):
    gateway, database = small_store_gateway
    running = _create(gateway, "cancel", "hang", background=True)
    with sqlite3.connect(database) as other:   # as a gateway sharing the file deletes it
        assert other.execute("DELETE FROM responses WHERE id = ?", (running["id"],)).rowcount == 1
    assert _call(gateway, "cancel", "GET", f"/{running['id']}").status_code == 404
    run = gateway.state.background.get("cancel", running["id"])
    assert run is not None and not run.is_done and not run.task.done()
    assert _call(gateway, "cancel", "POST", f"/{running['id']}/cancel").status_code == 404   # stops it here
    assert run.is_done and gateway.state.responses.num_unfinished("cancel") == 0
