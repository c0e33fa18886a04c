"""QA153 finding 2: every line of a `/v1/responses` batch was stored (`store` defaults to
true), so a batch of more lines than `responses_per_tenant` pushed the tenant's own
interactive stored responses out of its store and broke its agents' `previous_response_id`
chains. A line that does not set `store` is now sent with `store: false` (its result is in
the output file); one that sets `"store": true` is stored as asked."""
import json
import os
import time

import httpx
import openai
import pytest

from tests.gateway.conftest import KEYS

STORE_SIZE, NUM_LINES = 3, 6


@pytest.fixture(scope="module")
def small_store_gateway(fake_upstream, tmp_path_factory):
    from gateway.app import build_app
    from gateway.config import key_digest, parse_config
    from tests.conftest import ServedGateway
    from tests.gateway.serving import start_server

    os.environ["STEPAHEAD_TEST_FAKE_KEY"] = "sk-upstream-secret"
    database = tmp_path_factory.mktemp("fi55") / "responses.sqlite3"
    app = build_app(parse_config({
        "server": {"responses_db": str(database), "responses_per_tenant": STORE_SIZE},
        "models": [{"name": "fake", "kind": "upstream", "litellm_model": "openai/fake-model",
                    "api_base": f"{fake_upstream.base_url}/v1", "api_key_env": "STEPAHEAD_TEST_FAKE_KEY"}],
        "tenants": [{"name": "alpha", "api_key_sha256": [key_digest(KEYS["alpha"])]}]}))
    server = start_server(app)
    yield ServedGateway(server, app)
    server.stop()


def _responses(gateway, method: str, path: str = "", body: dict | None = None) -> httpx.Response:
    return httpx.request(method, f"{gateway.base_url}/v1/responses{path}", json=body, timeout=30,
                         headers={"Authorization": f"Bearer {KEYS['alpha']}"})


def _line(custom_id: str, **body) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/responses",
            "body": {"model": "fake", "input": f"line {custom_id}", **body}}


def test_the_sent_body_turns_store_off_only_for_responses_lines_that_leave_it_out():
    from gateway.batch_sending import sent_body
    body = {"model": "m", "input": "hi"}
    assert sent_body("/v1/responses", body) == {"model": "m", "input": "hi", "store": False}
    assert body == {"model": "m", "input": "hi"}   # the line itself is not changed
    assert sent_body("/v1/responses", {**body, "store": True})["store"] is True
    assert sent_body("/v1/chat/completions", body) is body   # chat's `store` is no response store


def test_a_responses_batch_larger_than_the_store_leaves_the_tenants_stored_responses(small_store_gateway):
    gateway = small_store_gateway
    agent = _responses(gateway, "POST", body={"model": "fake", "input": "the agent's first turn"})
    assert agent.status_code == 200, agent.text
    agent_id = agent.json()["id"]
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["alpha"], max_retries=0)
    lines = [_line(f"r{n}") for n in range(NUM_LINES)] + [_line("kept", store=True)]
    upload = client.files.create(file=("in.jsonl", "\n".join(map(json.dumps, lines)).encode()), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/responses", completion_window="24h")
    deadline_s = time.monotonic() + 60
    while (batch := client.batches.retrieve(batch.id)).status not in ("completed", "failed", "cancelled"):
        assert time.monotonic() < deadline_s, batch
        time.sleep(0.05)
    assert batch.status == "completed" and batch.request_counts.completed == NUM_LINES + 1, batch
    output = {line["custom_id"]: line["response"]["body"]
              for line in map(json.loads, client.files.content(batch.output_file_id).text.splitlines())}
    # the agent's stored response is still there, and its chain goes on
    assert _responses(gateway, "GET", f"/{agent_id}").status_code == 200
    follow = _responses(gateway, "POST", body={"model": "fake", "input": "next turn", "previous_response_id": agent_id})
    assert follow.status_code == 200, follow.text
    assert (output["r0"]["store"], output["kept"]["store"]) == (False, True)
    # a line that asked to be stored is; the others are not
    assert _responses(gateway, "GET", f"/{output['kept']['id']}").status_code == 200
    assert _responses(gateway, "GET", f"/{output['r0']['id']}").status_code == 404
