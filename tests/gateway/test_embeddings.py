"""`POST /v1/embeddings`: upstream models through litellm (and the passthrough model),
checked input, per-tenant limits and metrics; local models refuse it."""
import base64
import struct

import httpx
import openai
import pytest

from gateway.embeddings import MAX_INPUTS, EmbeddingsRequest, reply_body, upstream_reply
from gateway.schemas import validate
from gateway.errors import ApiError
from tests.gateway.conftest import KEYS
from tests.gateway.fake_openai import embedding_of


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=KEYS["alpha"], max_retries=0)


@pytest.mark.parametrize("model", ["fake", "fake-direct"])
def test_the_official_client_gets_one_vector_per_input_in_order(client, model):
    reply = client.embeddings.create(model=model, input=["first text", "second", "third"])
    assert reply.model == model and reply.object == "list"
    assert [item.index for item in reply.data] == [0, 1, 2]
    assert [item.embedding for item in reply.data] == [embedding_of(text) for text in ("first text", "second", "third")]
    assert reply.usage.prompt_tokens == reply.usage.total_tokens == len("first text") + len("second") + len("third")
    tokens = client.embeddings.create(model=model, input=[[5, 6, 7], [8]])
    assert [item.embedding for item in tokens.data] == [embedding_of([5, 6, 7]), embedding_of([8])]
    # `dimensions` reaches the upstream even for a model litellm does not know to take it
    cut = client.embeddings.create(model=model, input="solo", dimensions=2)
    assert [item.embedding for item in cut.data] == [embedding_of("solo", 2)]


def test_base64_vectors_are_packed_as_openai_packs_them(gateway):
    """The upstream is asked for floats; the gateway packs them (float32, little-endian)."""
    reply = httpx.post(f"{gateway.base_url}/v1/embeddings", headers=gateway.headers(),
                       json={"model": "fake", "input": "abc", "encoding_format": "base64"}).json()
    packed = base64.b64decode(reply["data"][0]["embedding"])
    assert list(struct.unpack(f"<{len(packed) // 4}f", packed)) == embedding_of("abc")
    floats = httpx.post(f"{gateway.base_url}/v1/embeddings", headers=gateway.headers(),
                        json={"model": "fake", "input": "abc", "encoding_format": "float"}).json()
    assert floats["data"][0]["embedding"] == embedding_of("abc")


@pytest.mark.parametrize("body, param", [
    ({"model": "fake", "input": ""}, "input"),
    ({"model": "fake", "input": []}, "input"),
    ({"model": "fake", "input": ["ok", ""]}, "input"),
    ({"model": "fake", "input": [[1, -2]]}, "input"),
    ({"model": "fake", "input": [1.5]}, "input"),
    ({"model": "fake", "input": ["text", [1, 2]]}, "input"),
    ({"model": "fake", "input": [True]}, "input"),
    ({"model": "fake", "input": {"text": "x"}}, "input"),
    ({"model": "fake", "input": ["x"] * (MAX_INPUTS + 1)}, "input"),
    ({"model": "fake", "input": "x", "encoding_format": "hex"}, "encoding_format"),
    ({"model": "fake", "input": "x", "dimensions": 0}, "dimensions"),
    ({"input": "x"}, "model"),
    ({"model": "tiny", "input": "x"}, "model"),
])
def test_bad_requests_are_400s_naming_the_parameter(gateway, body, param):
    answer = httpx.post(f"{gateway.base_url}/v1/embeddings", headers=gateway.headers(), json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param


def test_unknown_models_keys_and_upstream_errors_are_openai_shaped(gateway):
    url = f"{gateway.base_url}/v1/embeddings"
    unknown = httpx.post(url, headers=gateway.headers(), json={"model": "nope", "input": "x"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    assert httpx.post(url, json={"model": "fake", "input": "x"}).status_code == 401
    for status, expected in ((400, 400), (429, 429), (500, 502)):  # an upstream failure is a bad gateway
        answer = httpx.post(url, headers=gateway.headers(), json={"model": "fake", "input": f"status:{status}"})
        assert answer.status_code == expected and answer.json()["error"]["message"]


def test_requests_are_counted_per_tenant_and_charged_to_its_budget(gateway):
    limiter = gateway.state.limiters["embed_budget"]
    before = limiter.num_spent_tokens
    reply = httpx.post(f"{gateway.base_url}/v1/embeddings", headers=gateway.headers("embed_budget"),
                       json={"model": "fake", "input": "x" * 50}).json()
    assert reply["usage"]["total_tokens"] == 50
    assert limiter.num_spent_tokens == before + 50 and limiter.num_reserved_tokens == 0
    metrics = httpx.get(f"{gateway.base_url}/metrics", headers=gateway.headers("embed_budget")).text
    assert 'endpoint="embeddings"' in metrics and 'tenant="embed_budget"' in metrics


def test_an_upstream_request_reserves_at_least_one_token_a_byte(gateway):
    """Known failure: reserving 4 bytes a token admitted a request of 601 tokens for a tenant
    of 600 a minute (the provider here counts one token a character, as CJK text costs)."""
    limiter = gateway.state.limiters["tpm"]
    spent = limiter.num_spent_tokens
    answer = httpx.post(f"{gateway.base_url}/v1/embeddings", headers=gateway.headers("tpm"),
                        json={"model": "fake", "input": "x" * 601})
    assert answer.status_code == 429 and answer.headers["x-should-retry"] == "false"
    assert limiter.num_spent_tokens == spent and limiter.num_reserved_tokens == 0
    request = validate(EmbeddingsRequest, {"model": "m", "input": ["ab", "字"]})
    assert request.max_num_tokens() == 2 + 3 + 3 + 3 and request.estimated_tokens() == 2
    assert validate(EmbeddingsRequest, {"model": "m", "input": [[1, 2], [3]]}).max_num_tokens() == 3


def test_the_reply_is_named_after_the_gateway_model():
    raw = {"object": "list", "model": "provider-name", "data": [{"embedding": [0.5], "index": 0, "object": "embedding"}],
           "usage": {"prompt_tokens": 3, "total_tokens": 3}}
    assert reply_body(raw, "mine") == {"object": "list", "model": "mine", "data": [
        {"object": "embedding", "index": 0, "embedding": [0.5]}], "usage": {"prompt_tokens": 3, "total_tokens": 3}}
    assert validate(EmbeddingsRequest, {"model": "m", "input": [[1, 2], [3]]}).estimated_tokens() == 3
    with pytest.raises(ApiError):
        validate(EmbeddingsRequest, {"model": "m", "input": [[]]})


def test_upstream_reply_checks_shape_orders_by_index_and_checks_usage():
    good = {"data": [{"index": 1, "embedding": [1, 2.5]}, {"index": 0, "embedding": [0.5, 0.25]}],
            "usage": {"prompt_tokens": 4}}
    assert upstream_reply(good, 2) == {"data": [{"index": 0, "embedding": [0.5, 0.25]},
                                                {"index": 1, "embedding": [1, 2.5]}],
                                       "usage": {"prompt_tokens": 4, "total_tokens": 4}}
    assert upstream_reply({"data": [{"embedding": [0.5]}]}, 1)["usage"] == {"prompt_tokens": 0, "total_tokens": 0}
    vector = [{"embedding": [0.5]}]
    for wrong, num_inputs in [
            ({"data": [{"embedding": [True, False]}]}, 1), ({"data": [{"embedding": "abc"}]}, 1),
            ({"data": [{"embedding": [0.5, float("inf")]}]}, 1), ({"data": [{"embedding": [[0.5]]}]}, 1),
            ({"data": [{"embedding": [[0.5], [0.5, 1.0]]}]}, 1), ({"data": [{"embedding": [None]}]}, 1),
            ({"data": [{"embedding": [10 ** 30]}]}, 1), ({"data": [{"embedding": []}]}, 1),
            ({"data": "nope"}, 1), ([1, 2], 1), ({"data": vector}, 2), ({"data": vector * 2}, 1),
            ({"data": [{"index": "0", "embedding": [0.5]}]}, 1), ({"data": [{"index": True, "embedding": [0.5]}]}, 1),
            ({"data": [{"embedding": [0.5]}, {"embedding": [0.5, 0.5]}]}, 2),
            ({"data": vector, "usage": {"prompt_tokens": 3, "total_tokens": -3}}, 1),
            ({"data": vector, "usage": {"prompt_tokens": 1.5}}, 1), ({"data": vector, "usage": "lots"}, 1)]:
        with pytest.raises(ApiError) as caught:
            upstream_reply(wrong, num_inputs)
        assert (caught.value.status, caught.value.code) == (502, "upstream_error"), wrong
