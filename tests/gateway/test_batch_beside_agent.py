"""QA124 defect 2 through the gateway, on the tiny model: while a tenant's batch runs (one
line generating, the next waiting for the tenant's one slot), the tenant's agent's request
is served, not refused 429 because the batch's lines held its slot and its one queue place."""
import json
import time

import httpx

from tests.gateway.conftest import KEYS

TENANT = "conc"   # max_concurrent 1, max_queued 1
LONG_LINE = {"model": "tiny", "max_tokens": 400, "ignore_eos": True, "temperature": 0,
             "messages": [{"role": "user", "content": "Tell me a long story."}]}


def _until(condition, what: str, timeout_s: float = 120) -> None:
    deadline_s = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline_s, what
        time.sleep(0.01)


def test_an_agents_request_is_served_while_its_tenants_batch_runs(gateway):
    limiter = gateway.state.limiters[TENANT]
    headers = {"Authorization": f"Bearer {KEYS[TENANT]}"}
    lines = "\n".join(json.dumps({"custom_id": f"r{n}", "method": "POST", "url": "/v1/chat/completions",
                                  "body": LONG_LINE}) for n in range(2))
    with httpx.Client(base_url=gateway.base_url, headers=headers, timeout=120) as client:
        upload = client.post("/v1/files", files={"file": ("in.jsonl", lines.encode())}, data={"purpose": "batch"})
        batch = client.post("/v1/batches", json={"input_file_id": upload.json()["id"], "completion_window": "24h",
                                                 "endpoint": "/v1/chat/completions"}).json()
        try:
            # one line runs, the other waits for the slot (before: in the queue, its one place)
            _until(lambda: limiter.num_active == 1
                   and limiter.num_queued + getattr(limiter, "num_batch_waiting", 0) == 1, "both lines sent")
            step = client.post("/v1/chat/completions", json={"model": "tiny", "max_tokens": 2, "messages": [
                {"role": "user", "content": "Hi"}]})
            assert step.status_code == 200, step.text
            _until(lambda: client.get(f"/v1/batches/{batch['id']}").json()["status"] == "completed", "batch done")
            counts = client.get(f"/v1/batches/{batch['id']}").json()["request_counts"]
            assert (counts["completed"], counts["failed"]) == (2, 0)
        finally:
            client.post(f"/v1/batches/{batch['id']}/cancel")
            _until(lambda: client.get(f"/v1/batches/{batch['id']}").json()["status"] in (
                "completed", "cancelled", "failed", "expired"), "batch ended")
    _until(lambda: limiter.num_active == 0 and limiter.num_queued == 0, "tenant idle", 30)


def test_lines_a_cancelled_batch_gives_up_count_as_clients_gone_not_503s(gateway):
    """QA165: a line still waiting for its tenant's slot when its batch was cancelled added
    1 to `stepahead_requests_total{status="503"}` (the shutdown's count): a 5xx alert fired
    on every such cancel. No one waits for it: it counts as a client that left (499)."""
    from tests.gateway.test_metrics_cut_requests import _sums

    limiter = gateway.state.limiters[TENANT]
    headers = {"Authorization": f"Bearer {KEYS[TENANT]}"}
    lines = "\n".join(json.dumps({"custom_id": f"w{n}", "method": "POST", "url": "/v1/chat/completions",
                                  "body": {**LONG_LINE, "max_tokens": 4}}) for n in range(2))
    with httpx.Client(base_url=gateway.base_url, headers=headers, timeout=120) as client:
        before = _sums(client.get("/metrics", headers={"Authorization": f"Bearer {KEYS['ops']}"}).text, TENANT)
        with client.stream("POST", "/v1/chat/completions", json={**LONG_LINE, "stream": True}) as held:
            _until(lambda: limiter.num_active == 1, "the slot held")
            upload = client.post("/v1/files", files={"file": ("in.jsonl", lines.encode())}, data={"purpose": "batch"})
            batch = client.post("/v1/batches", json={"input_file_id": upload.json()["id"], "completion_window": "24h",
                                                     "endpoint": "/v1/chat/completions"}).json()
            _until(lambda: getattr(limiter, "num_batch_waiting", limiter.num_queued) >= 1, "a line waits")
            client.post(f"/v1/batches/{batch['id']}/cancel")
            _until(lambda: client.get(f"/v1/batches/{batch['id']}").json()["status"] == "cancelled", "cancelled", 30)
            held.close()
        _until(lambda: limiter.num_active == 0, "tenant idle", 30)
        after = _sums(client.get("/metrics", headers={"Authorization": f"Bearer {KEYS['ops']}"}).text, TENANT)
    grew = {name: after[name] - before.get(name, 0.0) for name in after if after[name] != before.get(name, 0.0)}
    assert not any(name.startswith("stepahead_requests_5") for name in grew), grew
    assert grew.get("stepahead_requests_499", 0) >= 2, grew   # the held stream, closed, and the line(s) given up
