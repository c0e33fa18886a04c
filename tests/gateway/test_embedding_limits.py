"""`POST /v1/embeddings` limits and charges: a RoBERTa-like local model takes only the
positions its position ids reach (they start after the padding index), a model failure
charges nothing, and an upstream that sends no usage is charged the estimate."""
from __future__ import annotations

import asyncio
import json
import math
import os

import httpx
import numpy as np
import pytest
import torch

from gateway.app import build_app
from gateway.config import key_digest, parse_config
from gateway.embeddings import EmbeddingsRequest, reply_body, upstream_call, upstream_reply
from gateway.schemas import validate
from tests.gateway.serving import start_server

KEY, BUDGET_KEY = "sk-limits", "sk-limits-budget"
USABLE_POSITIONS = 64   # max_position_embeddings 66 less padding_idx 1 less 1


@pytest.fixture(scope="module")
def roberta_dir(tmp_path_factory):
    from transformers import RobertaConfig, RobertaModel

    from shards.tiny_model import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    torch.manual_seed(3)
    model = RobertaModel(RobertaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                                       num_attention_heads=2, intermediate_size=64, pad_token_id=1,
                                       max_position_embeddings=USABLE_POSITIONS + 2))
    path = tmp_path_factory.mktemp("roberta")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


async def _no_usage_upstream(scope, receive, send):
    """An OpenAI-compatible embeddings upstream whose replies hold no `usage`."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    items = json.loads(body)["input"]
    items = [items] if isinstance(items, str) or isinstance(items[0], int) else items
    reply = {"object": "list", "model": "nousage", "data": [
        {"object": "embedding", "index": i, "embedding": [0.5, 0.25]} for i in range(len(items))]}
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps(reply).encode()})


@pytest.fixture(scope="module")
def served(roberta_dir):
    upstream = start_server(_no_usage_upstream)
    os.environ.setdefault("STEPAHEAD_TEST_NOUSAGE_KEY", "sk-nousage")
    config = parse_config({
        "models": [{"name": "rob", "kind": "embedding", "path": str(roberta_dir), "normalize": False},
                   {"name": "nousage", "kind": "upstream", "litellm_model": "openai/nousage",
                    "api_base": f"{upstream.base_url}/v1", "api_key_env": "STEPAHEAD_TEST_NOUSAGE_KEY"}],
        "tenants": [{"name": "t", "api_key_sha256": [key_digest(KEY)]},
                    {"name": "budget", "api_key_sha256": [key_digest(BUDGET_KEY)],
                     "limits": {"token_budget": 10_000}}]})
    app = build_app(config)
    server = start_server(app)
    yield server, app.state.gateway
    server.stop()
    upstream.stop()


def post(server, body: dict, key: str = KEY) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/embeddings", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {key}"})


def test_position_limits_follow_transformers_position_ids():
    from transformers import BertConfig, EsmConfig, MPNetConfig, RobertaConfig, XLMRobertaConfig

    from gateway.local_embeddings import position_limit

    assert position_limit(XLMRobertaConfig(max_position_embeddings=514)) == 512        # xlm-r, multilingual-e5
    assert position_limit(XLMRobertaConfig(max_position_embeddings=8194)) == 8192      # bge-m3
    assert position_limit(MPNetConfig(max_position_embeddings=514)) == 512             # all-mpnet-base-v2
    assert position_limit(RobertaConfig(max_position_embeddings=514)) == 512           # all-distilroberta
    assert position_limit(BertConfig(max_position_embeddings=512)) == 512
    assert position_limit(EsmConfig(vocab_size=33, max_position_embeddings=1026,
                                    position_embedding_type="rotary")) == 1026


def test_a_roberta_model_takes_its_usable_positions_and_refuses_one_more(served):
    """Known failure: 65 and 66 tokens passed the check (66 = max_position_embeddings) and
    crashed in the model with a 500; 67 was refused naming 66."""
    server, _ = served
    ids = [5] * USABLE_POSITIONS    # NOTE: not the padding id, which takes no position
    full = post(server, {"model": "rob", "input": [ids], "encoding_format": "float"})
    assert full.status_code == 200, full.text
    for length in (USABLE_POSITIONS + 1, USABLE_POSITIONS + 2, USABLE_POSITIONS + 3):
        answer = post(server, {"model": "rob", "input": [[5] * length]})
        assert answer.status_code == 400, (length, answer.text)
        error = answer.json()["error"]
        assert (error["param"], error["code"]) == ("input", "context_length_exceeded")
        assert f"at most {USABLE_POSITIONS}." in error["message"]


def test_a_local_model_failure_is_a_500_that_charges_nothing(served):
    """Known failure: a request the model crashed on was charged its whole count."""
    server, state = served
    backend, limiter = state.backends["rob"], state.limiters["budget"]
    spent = limiter.num_spent_tokens

    def broken(ids, dimensions):
        raise RuntimeError("index out of range in self")
    backend._embed = broken
    try:
        answer = post(server, {"model": "rob", "input": "some text"}, key=BUDGET_KEY)
    finally:
        del backend._embed
    assert answer.status_code == 500 and answer.json()["error"]["code"] == "internal_error"
    assert limiter.num_spent_tokens == spent and limiter.num_reserved_tokens == 0
    served_ok = post(server, {"model": "rob", "input": "some text"}, key=BUDGET_KEY)
    assert limiter.num_spent_tokens == spent + served_ok.json()["usage"]["total_tokens"] > spent


def test_a_client_that_leaves_a_local_model_mid_run_is_charged(served):
    """The batch in flight finishes whether or not its client waits: a client that left is
    charged its count (a model failure, above, is not)."""
    import time

    server, state = served
    backend, limiter = state.backends["rob"], state.limiters["budget"]
    count = post(server, {"model": "rob", "input": "some text"}, key=BUDGET_KEY).json()["usage"]["total_tokens"]
    spent = limiter.num_spent_tokens
    embed = backend._embed

    def slow(ids, dimensions):
        time.sleep(1.0)
        return embed(ids, dimensions)
    backend._embed = slow
    try:
        with pytest.raises(httpx.TimeoutException):
            httpx.post(f"{server.base_url}/v1/embeddings", json={"model": "rob", "input": "some text"},
                       headers={"Authorization": f"Bearer {BUDGET_KEY}"}, timeout=0.3)
        deadline = time.time() + 10
        while limiter.num_reserved_tokens and time.time() < deadline:
            time.sleep(0.05)
    finally:
        time.sleep(1.2)   # the slow batch ends before the model is given back
        del backend._embed
    assert limiter.num_spent_tokens == spent + count and limiter.num_reserved_tokens == 0


def test_dimensions_on_an_unnormalized_model_is_the_raw_prefix(served):
    server, _ = served
    body = {"model": "rob", "input": "a text", "encoding_format": "float"}
    full = post(server, body).json()["data"][0]["embedding"]
    cut = post(server, {**body, "dimensions": 4}).json()["data"][0]["embedding"]
    assert np.allclose(cut, full[:4]) and not math.isclose(np.linalg.norm(cut), 1.0, rel_tol=1e-3)


def test_an_upstream_that_sends_no_usage_is_charged_and_reports_the_estimate(served):
    """Known failure: a reply with no usage (litellm reports it as zeros) charged 0 tokens,
    so a token_budget or tokens_per_minute did not hold."""
    server, state = served
    limiter = state.limiters["budget"]
    spent = limiter.num_spent_tokens
    body = {"model": "nousage", "input": ["x" * 40, "y" * 20]}
    estimate = validate(EmbeddingsRequest, body).estimated_tokens()
    answer = post(server, body, key=BUDGET_KEY)
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"] == {"prompt_tokens": estimate, "total_tokens": estimate} and estimate == 11 + 6
    assert limiter.num_spent_tokens == spent + estimate and limiter.num_reserved_tokens == 0


def test_an_upstream_call_keeps_the_providers_count_and_fills_a_missing_one():
    request = validate(EmbeddingsRequest, {"model": "m", "input": "abcdefgh"})

    def embed_replying(raw: dict):
        async def embed(request):
            return reply_body(upstream_reply(raw, 1), "m")
        return embed
    vector = [{"embedding": [0.5]}]
    for raw, expected in [({"data": vector}, 3),
                          ({"data": vector, "usage": {"prompt_tokens": 0, "total_tokens": 0}}, 3),
                          ({"data": vector, "usage": {"prompt_tokens": 11}}, 11)]:
        call = upstream_call(request, embed_replying(raw))
        assert call.num_failed_tokens == call.num_cancelled_tokens == 3
        reply = asyncio.run(call.run())
        assert reply["usage"] == {"prompt_tokens": expected, "total_tokens": expected}, raw


def test_a_reply_renders_item_by_item_as_json_response_renders_it():
    from starlette.responses import JSONResponse

    from gateway.embeddings import reply_json

    reply = reply_body({"data": [{"embedding": [0.5, -1e-7, 3.0]}, {"embedding": "AAAA"}],
                        "usage": {"prompt_tokens": 3, "total_tokens": 3}}, "modèle")
    assert json.loads(reply_json(reply)) == json.loads(JSONResponse(reply).body) == reply
    assert len(reply_json(reply)) == len(JSONResponse(reply).body)
    assert json.loads(reply_json({"data": []})) == {"data": []}
