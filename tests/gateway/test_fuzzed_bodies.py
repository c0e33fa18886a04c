"""Property: any mutation of a valid body gets a 2xx or an OpenAI-shaped 4xx, never a 5xx, a
dropped connection or a hang, on all three generating POST endpoints, for a local model and
for an upstream one (litellm's mock), and on /v1/embeddings (an upstream model)."""
import json
import random

import httpx
import pytest

from tests.gateway.body_mutations import EMBEDDINGS_BODY, VALID_BODIES, mutate

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
            if not _served(reply, described):
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


def _served(reply: httpx.Response, described: str) -> bool:
    """True for a 2xx; for anything else, that it is a 4xx with an OpenAI error body."""
    assert reply.status_code < 500, described
    if reply.status_code < 400:
        return True
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"], described
    return False


def test_mutated_embeddings_bodies_never_get_a_server_error(gateway):
    rng = random.Random("/v1/embeddings")
    with httpx.Client(base_url=gateway.base_url, headers=gateway.headers("alpha"), timeout=60) as client:
        assert client.post("/v1/embeddings", json=EMBEDDINGS_BODY).status_code == 200
        served = 0
        for _ in range(REQUESTS_PER_ENDPOINT):
            body = mutate(EMBEDDINGS_BODY, rng)
            reply = client.post("/v1/embeddings", content=json.dumps(body))
            described = f"{reply.status_code} for {json.dumps(body)[:300]}: {reply.text[:300]}"
            if _served(reply, described):
                served += 1
                data = reply.json()["data"]
                assert reply.json()["object"] == "list" and [item["index"] for item in data] == \
                    list(range(len(data))) and data, described
    assert served >= REQUESTS_PER_ENDPOINT // 10, served


CONVERSATION_ITEMS = [
    {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    {"type": "message", "role": "assistant", "content": "hello", "id": "msg_a"},
    {"type": "function_call", "call_id": "c1", "name": "get_w", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "ok"}]


def test_mutated_conversation_items_never_get_a_server_error_nor_break_the_next_turn(gateway):
    """Mutated create and add bodies of the Conversations API get a 2xx or a 4xx, and so
    does a Responses turn in whatever a conversation accepted (a 400 when its items do not
    make a conversation, e.g. a tool output whose call was removed, as at OpenAI)."""
    rng = random.Random("/v1/conversations")
    valid = {"metadata": {"k": "v"}, "items": CONVERSATION_ITEMS}
    with httpx.Client(base_url=gateway.base_url, headers=gateway.headers("alpha"), timeout=60) as client:
        served = 0
        for _ in range(REQUESTS_PER_ENDPOINT):
            body = {k: v for k, v in mutate(valid, rng).items() if k != "stream"}
            reply = client.post("/v1/conversations", content=json.dumps(body))
            described = f"{reply.status_code} for {json.dumps(body)[:300]}: {reply.text[:300]}"
            if not _served(reply, described):
                continue
            conversation_id = reply.json()["id"]
            added = client.post(f"/v1/conversations/{conversation_id}/items",
                                content=json.dumps({"items": mutate({"items": CONVERSATION_ITEMS}, rng)
                                                    .get("items", [])}))
            _served(added, f"{added.status_code} adding: {added.text[:300]}")
            turn = client.post("/v1/responses", json={"model": "tiny", "input": "next", "max_output_tokens": 2,
                                                      "conversation": conversation_id})
            served += _served(turn, f"{described}; then {added.text[:300]}; then {turn.text[:300]}")
    assert served >= REQUESTS_PER_ENDPOINT // 10, served


def test_mutated_files_and_batches_requests_never_get_a_server_error(gateway):
    """Mutated batch bodies, input files with mutated lines, uploads with odd parts and
    garbage multipart bodies, odd ids in paths: a 2xx or an OpenAI-shaped 4xx each."""
    rng = random.Random("/v1/batches")
    line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}}
    with httpx.Client(base_url=gateway.base_url, headers=gateway.headers("alpha"), timeout=60) as client:
        upload = client.post("/v1/files", data={"purpose": "batch"},
                             files={"file": ("in.jsonl", json.dumps(line).encode())}).json()
        valid = {"input_file_id": upload["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h",
                 "metadata": {"k": "v"}}
        for _ in range(REQUESTS_PER_ENDPOINT):
            kind = rng.randrange(4)
            if kind == 0:
                body = {k: v for k, v in mutate(valid, rng).items() if k != "stream"}
                reply = client.post("/v1/batches", content=json.dumps(body))
            elif kind == 1:
                lines = [json.dumps(mutate(line, rng)) for _ in range(3)]
                mutated = client.post("/v1/files", data={"purpose": "batch"},
                                      files={"file": ("f.jsonl", "\n".join(lines).encode())}).json()
                reply = client.post("/v1/batches", json={**valid, "input_file_id": mutated["id"]})
            elif kind == 2:
                garbage = bytes(rng.randrange(256) for _ in range(rng.randrange(300)))
                reply = client.post("/v1/files", content=garbage, headers={"content-type": rng.choice(
                    ["multipart/form-data; boundary=zz", "multipart/form-data", "text/plain"])})
            else:
                odd = rng.choice(["%2F..%2Fx", "é" * 300, "file-" + "0" * 24, "batch_%00", "x" * 2000])
                reply = client.request(rng.choice(["GET", "POST", "DELETE"]), rng.choice(
                    ["/v1/files/{}", "/v1/files/{}/content", "/v1/batches/{}", "/v1/batches/{}/cancel"]).format(odd))
            if reply.status_code != 405:
                _served(reply, f"{kind}: {reply.status_code} {reply.text[:300]}")
