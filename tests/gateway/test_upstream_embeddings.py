"""Upstream embeddings that misbehave, through litellm ("emb") and the passthrough model
("emb-direct", whose embeddings go through litellm too): one upstream call each (no hidden
SDK retries), a reply of the wrong shape or with bad usage a 502 that charges nothing odd,
and the tenant's slot always given back."""
import asyncio
import json
import logging
import os
import time
from collections import Counter

import httpx
import pytest

from gateway.app import build_app
from gateway.config import key_digest, parse_config
from gateway.embeddings import EmbeddingsRequest
from gateway.errors import ApiError
from gateway.model_configs import UpstreamModelConfig
from gateway.passthrough import PassthroughBackend
from gateway.schemas import validate
from gateway.upstream import UpstreamBackend
from tests.conftest import ServedGateway
from tests.gateway.fake_openai import request_body
from tests.gateway.serving import start_server

KEY_ENV = "STEPAHEAD_TEST_EMB_KEY"
KEYS = {"solo": "sk-emb-solo", "budget": "sk-emb-budget", "ops": "sk-emb-ops"}
LIMITS = {"solo": {"max_concurrent": 1, "max_queued": 1}, "budget": {"token_budget": 1000}}
MODELS = ("emb", "emb-direct")
NAN = float("nan")

# a reply for each misbehaviour, by the first input's text (`n`: the number of inputs)
WRONG = {
    "usage-text": lambda n: _reply(n, usage={"prompt_tokens": -500, "total_tokens": "lots"}),
    "usage-total-text": lambda n: _reply(n, usage={"prompt_tokens": 5, "total_tokens": "lots"}),
    "usage-negative": lambda n: _reply(n, usage={"prompt_tokens": -100000, "total_tokens": -100000}),
    "usage-float": lambda n: _reply(n, usage={"prompt_tokens": 2.5, "total_tokens": 2.5}),
    "vector-string": lambda n: _reply(n, vector="abc"),
    "vector-of-strings": lambda n: _reply(n, vector=["a", "b"]),
    "vector-empty": lambda n: _reply(n, vector=[]),
    "vector-nan": lambda n: _reply(n, vector=[0.5, NAN]),
    "vector-nested": lambda n: _reply(n, vector=[[0.5], [0.25]]),
    "data-empty": lambda n: {**_reply(n), "data": []},
    "data-short": lambda n: _reply(1),
    "data-long": lambda n: _reply(n + 1),
    "index-twice": lambda n: {**_reply(n), "data": [{**item, "index": 0} for item in _reply(n)["data"]]},
    "index-out": lambda n: {**_reply(n), "data": [{**item, "index": i + 5} for i, item in enumerate(_reply(n)["data"])]},
    "widths-differ": lambda n: {**_reply(n), "data": [{**item, "embedding": [0.5] * (i + 1)}
                                                      for i, item in enumerate(_reply(n)["data"])]},
}


def _reply(num_vectors: int, vector=None, usage=None) -> dict:
    return {"object": "list", "model": "up", "usage": usage or {"prompt_tokens": 3, "total_tokens": 3},
            "data": [{"object": "embedding", "index": i, "embedding": [0.5, 0.25] if vector is None else vector}
                     for i in range(num_vectors)]}


class FakeEmbedder:
    """An OpenAI-compatible `/v1/embeddings` that counts its calls by first input:
    "status:429" answers a 429 with `Retry-After: 30`, "hang" nothing until the caller
    leaves (60 s at most), a name in WRONG that reply (a 200), anything else a good reply
    (one vector per input, in reverse order, to show the gateway orders them by index)."""

    def __init__(self) -> None:
        self.calls: Counter = Counter()

    async def __call__(self, scope, receive, send) -> None:
        raw = await request_body(scope, receive, send)
        if raw is None:
            return
        items = json.loads(raw)["input"]
        items = [items] if isinstance(items, str) else items
        first = items[0] if isinstance(items[0], str) else "tokens"
        self.calls[first] += 1
        status, headers, body = 200, [], None
        if first == "status:429":
            status, headers = 429, [(b"retry-after", b"30")]
            body = {"error": {"message": "Rate limit reached.", "type": "requests", "code": "rate_limit_exceeded"}}
        elif first == "hang":   # until the caller gives up (a stop then waits for no sleeper)
            try:
                await asyncio.wait_for(receive(), 60)   # the body was read: only a disconnect comes
            except TimeoutError:
                pass
            return
        elif first in WRONG:
            body = WRONG[first](len(items))
        if body is None:
            body = {"object": "list", "model": "up", "usage": {"prompt_tokens": 4, "total_tokens": 4},
                    "data": [{"object": "embedding", "index": i, "embedding": [float(i), 1.0]}
                             for i in reversed(range(len(items)))]}
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), *headers]})
        await send({"type": "http.response.body", "body": json.dumps(body).encode()})


@pytest.fixture(scope="module")
def embedder():
    os.environ.setdefault(KEY_ENV, "sk-upstream-secret")
    fake = FakeEmbedder()
    server = start_server(fake)
    yield fake, f"{server.base_url}/v1"
    server.stop()


@pytest.fixture(scope="module")
def gateway(embedder):
    _, api_base = embedder
    upstream = {"kind": "upstream", "litellm_model": "openai/fake-embedder", "api_base": api_base,
                "api_key_env": KEY_ENV}
    config = parse_config({
        "server": {"queue_timeout_s": 2},
        "models": [{"name": "emb", **upstream}, {"name": "emb-direct", **upstream, "passthrough": True},
                   {"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                    "litellm_params": {"mock_response": "This is a mock reply."}}],
        "tenants": [{"name": name, "api_key_sha256": [key_digest(key)], "limits": LIMITS.get(name, {}),
                     "admin": name == "ops"} for name, key in KEYS.items()],
    })
    app = build_app(config)
    server = start_server(app)
    yield ServedGateway(server, app)
    server.stop()


def post(gateway, tenant: str, body: dict) -> httpx.Response:
    return httpx.post(f"{gateway.base_url}/v1/embeddings", json=body, timeout=30,
                      headers={"Authorization": f"Bearer {KEYS[tenant]}"})


def requests_total(gateway, model: str, status: int) -> float:
    text = httpx.get(f"{gateway.base_url}/metrics", headers={"Authorization": f"Bearer {KEYS['ops']}"}).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("stepahead_requests_total{") and 'endpoint="embeddings"' in line \
                and f'model_name="{model}"' in line and f'status="{status}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def embed_directly(model: str, api_base: str, body: dict, timeout_s: float = 3.0):
    """(the reply or the exception the backend raised, seconds) from the backend itself."""
    async def drive():
        config = UpstreamModelConfig(name=model, litellm_model="openai/fake-embedder", api_base=api_base,
                                     api_key_env=KEY_ENV, timeout_s=timeout_s, passthrough=model == "emb-direct")
        up = (PassthroughBackend if config.passthrough else UpstreamBackend)(config)
        await up.start()
        started = time.perf_counter()
        try:
            return await up.embed(validate(EmbeddingsRequest, {"model": model, **body})), \
                time.perf_counter() - started
        except Exception as exc:   # the test looks at what escaped
            return exc, time.perf_counter() - started
        finally:
            await up.stop()
    return asyncio.run(drive())


@pytest.mark.parametrize("model", MODELS)
def test_bad_usage_is_a_502_and_the_slot_comes_back(gateway, model):
    """Usage counts that are not non-negative integers: a 502, and the max_concurrent=1
    tenant's slot is free again at once (it used to stay taken until a restart)."""
    limiter = gateway.state.limiters["solo"]
    for text in ("usage-text", "usage-total-text", "usage-float"):
        answer = post(gateway, "solo", {"model": model, "input": text})
        assert answer.status_code == 502, answer.text
        assert answer.json()["error"]["code"] == "upstream_error"
        assert limiter.num_active == 0 and limiter.num_reserved_tokens == 0
        assert post(gateway, "solo", {"model": model, "input": "fine"}).status_code == 200


@pytest.mark.parametrize("model", MODELS)
def test_negative_usage_is_a_502_that_gives_no_tokens_back(gateway, model):
    limiter = gateway.state.limiters["budget"]
    before = limiter.num_spent_tokens
    answer = post(gateway, "budget", {"model": model, "input": "usage-negative"})
    assert answer.status_code == 502 and answer.json()["error"]["code"] == "upstream_error"
    assert limiter.num_spent_tokens >= before


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("text", [name for name in WRONG if not name.startswith("usage")])
def test_embeddings_of_the_wrong_shape_are_a_502(gateway, model, text):
    answer = post(gateway, "ops", {"model": model, "input": [text, "second", "third"]})
    assert answer.status_code == 502, answer.text
    assert answer.json()["error"]["code"] == "upstream_error"


def test_a_good_reply_comes_back_in_index_order(gateway):
    for model in MODELS:
        answer = post(gateway, "ops", {"model": model, "input": ["a", "b", "c"]})
        assert answer.status_code == 200, answer.text
        assert [(item["index"], item["embedding"]) for item in answer.json()["data"]] == [
            (0, [0.0, 1.0]), (1, [1.0, 1.0]), (2, [2.0, 1.0])]


def test_a_mock_response_model_refuses_embeddings_with_a_400_naming_model(gateway):
    answer = post(gateway, "ops", {"model": "mock", "input": "x"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == "model"
    assert answer.json()["error"]["code"] == "model_not_supported"


@pytest.mark.parametrize("model", MODELS)
def test_an_upstream_429_is_one_call_and_comes_back_at_once(embedder, model):
    fake, api_base = embedder
    before = fake.calls["status:429"]
    error, took_s = embed_directly(model, api_base, {"input": "status:429"})
    assert isinstance(error, ApiError) and error.status == 429, repr(error)
    assert error.headers["Retry-After"] == "30"
    assert fake.calls["status:429"] - before == 1 and took_s < 2.0


@pytest.mark.parametrize("model", MODELS)
def test_a_hang_is_one_call_and_a_504_after_timeout_s(embedder, model):
    fake, api_base = embedder
    before = fake.calls["hang"]
    error, took_s = embed_directly(model, api_base, {"input": "hang"}, timeout_s=1.0)
    assert isinstance(error, ApiError) and (error.status, error.code) == (504, "upstream_timeout"), repr(error)
    assert fake.calls["hang"] - before == 1 and took_s < 2.5


class Broken(UpstreamBackend):
    """An upstream model whose embeddings come back with something no check expected (a bug)."""

    async def embed(self, request, **ids):
        return {"object": "list", "data": [], "model": "broken", "usage": {"total_tokens": "lots"}}


def test_an_unexpected_failure_is_a_counted_500_and_frees_the_slot(gateway):
    """Even past every check, a failure while accounting gives the slot back, and the
    500 is counted (it used to leave the max_concurrent=1 tenant locked out, uncounted)."""
    gateway.state.backends["broken"] = Broken(UpstreamModelConfig(name="broken", litellm_model="openai/x"))
    try:
        before = requests_total(gateway, "broken", 500)
        answer = post(gateway, "solo", {"model": "broken", "input": "x"})
        assert answer.status_code == 500 and answer.json()["error"]["type"] == "server_error"
        assert requests_total(gateway, "broken", 500) == before + 1
        assert gateway.state.limiters["solo"].num_active == 0
    finally:
        del gateway.state.backends["broken"]


def test_a_failed_embeddings_call_logs_its_x_request_id_and_tenant(gateway, caplog):
    """The WARNING line a chat's 5xx writes (here a reply of the wrong shape: a 502), under the
    id its client got (was: none)."""
    with caplog.at_level(logging.WARNING, logger="stepahead.gateway"):
        answer = post(gateway, "budget", {"model": "emb", "input": "data-empty"})
    assert answer.status_code == 502
    lines = [r.getMessage() for r in caplog.records if "upstream failure" in r.getMessage()]
    assert lines == [f"stepahead: upstream failure: request {answer.headers['x-request-id']}, tenant budget, "
                     f"model emb: 502 upstream_error: " + answer.json()["error"]["message"]]
