"""Property: any mutation of a valid body gets a 2xx or an OpenAI-shaped 4xx, never a 5xx, a
dropped connection or a hang, on all three POST endpoints, for a local model and for an
upstream one (litellm's mock)."""
import json
import random

import httpx
import pytest

from tests.gateway.body_mutations import VALID_BODIES, mutate

REQUESTS_PER_ENDPOINT = 60


@pytest.mark.parametrize("model", ["tiny", "mock"])
@pytest.mark.parametrize("path", sorted(VALID_BODIES))
def test_mutated_bodies_never_get_a_server_error(gateway, path, model):
    rng = random.Random(path + model)
    valid = {**VALID_BODIES[path], "model": model}
    if model != "tiny" and "prompt" in valid:
        valid["prompt"] = "hello"   # upstream completions take one prompt per request
    with httpx.Client(base_url=gateway.base_url, headers=gateway.headers("alpha"), timeout=60) as client:
        assert client.post(path, json=valid).status_code == 200
        served = 0
        for _ in range(REQUESTS_PER_ENDPOINT):
            body = mutate(valid, rng)
            reply = client.post(path, content=json.dumps(body))
            described = f"{reply.status_code} for {json.dumps(body)[:300]}: {reply.text[:300]}"
            assert reply.status_code < 500, described
            if reply.status_code >= 400:
                error = reply.json()["error"]
                assert set(error) == {"message", "type", "param", "code"} and error["message"], described
                continue
            served += 1
            if body.get("stream") is True:
                assert reply.text.rstrip().endswith("data: [DONE]") or "response.completed" in reply.text \
                    or "response.incomplete" in reply.text, described
                events = [json.loads(line.removeprefix("data: ")) for line in reply.text.splitlines()
                          if line.startswith("data: ") and line != "data: [DONE]"]
                kinds = {event.get("object") or event.get("type") for event in events}
                assert kinds and None not in kinds and "error" not in kinds, described
            else:
                assert reply.json()["object"] in ("chat.completion", "text_completion", "response"), described
    assert served >= REQUESTS_PER_ENDPOINT // 10, served   # mutants reach the serving path, not just validation
