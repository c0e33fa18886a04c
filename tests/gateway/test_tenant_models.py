"""A tenant's `models` (docs/serving.md "The config file"): its keys may use only the
models it names; any other is to them as a model not served, a 404 `model_not_found`
naming only theirs, on every endpoint, and absent from their model list. A tenant
without `models` uses every model. A name no [[models]] entry serves, or an empty list,
is a bad config; a reload applies a change at once."""
from __future__ import annotations

import json

import httpx
import pytest

from gateway.app import build_app
from gateway.config import ConfigError, GatewayConfig, TenantConfig, UpstreamModelConfig, key_digest, parse_config
from gateway.errors import ApiError
from gateway.reload import apply_tenants
from tests.gateway.conftest import FENCED_MODELS

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _assert_not_found(reply: httpx.Response, model: str) -> None:
    assert reply.status_code == 404, reply.text
    error = reply.json()["error"]
    assert (error["code"], error["param"], error["type"]) == ("model_not_found", "model", "invalid_request_error")
    assert f"'{model}' does not exist or you do not have access to it" in error["message"]
    assert "tiny" not in error["message"].replace(f"'{model}'", "")   # only the tenant's models are named
    assert all(name in error["message"] for name in FENCED_MODELS)


def test_a_fenced_tenant_sees_and_uses_only_its_models(gateway):
    with httpx.Client(base_url=gateway.base_url, headers=gateway.headers("fenced"), timeout=30) as client:
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == FENCED_MODELS
        assert client.get("/v1/models/mock").json()["id"] == "mock"
        _assert_not_found(client.get("/v1/models/tiny"), "tiny")
        _assert_not_found(client.delete("/v1/models/tiny"), "tiny")   # not the 403 of a served model
        for path, body in (("/v1/chat/completions", CHAT), ("/v1/completions", {"prompt": "hi", "max_tokens": 2}),
                           ("/v1/embeddings", {"input": "hi"}), ("/v1/responses", {"input": "hi"}),
                           ("/v1/responses/input_tokens", {"input": "hi"})):
            _assert_not_found(client.post(path, json={"model": "tiny", **body}), "tiny")
        allowed = client.post("/v1/chat/completions", json={"model": "mock", **CHAT})
        assert allowed.status_code == 200 and allowed.json()["model"] == "mock"


def test_a_tenant_without_models_uses_every_model(gateway):
    with httpx.Client(base_url=gateway.base_url, headers=gateway.headers("alpha"), timeout=30) as client:
        listed = [m["id"] for m in client.get("/v1/models").json()["data"]]
        assert listed == list(gateway.app.state.gateway.backends) and "tiny" in listed
        assert client.post("/v1/chat/completions", json={"model": "tiny", **CHAT}).status_code == 200


def test_a_fenced_tenants_batch_naming_another_model_fails_at_create_and_a_line_sent_anyway_is_a_404(gateway):
    line = {"custom_id": "r0", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "tiny", **CHAT}}
    with httpx.Client(base_url=gateway.base_url, headers=gateway.headers("fenced"), timeout=30) as client:
        upload = client.post("/v1/files", data={"purpose": "batch"},
                             files={"file": ("in.jsonl", json.dumps(line).encode())})
        assert upload.status_code == 200, upload.text
        created = client.post("/v1/batches", json={"input_file_id": upload.json()["id"],
                                                   "endpoint": "/v1/chat/completions", "completion_window": "24h"})
        failed = created.json()
        assert failed["status"] == "failed", failed
        [error] = failed["errors"]["data"]
        assert (error["code"], error["line"]) == ("model_not_found", 1) and "mock" in error["message"]
    # a batch's lines are sent with an internal key of its tenant: the same 404 for each
    state = gateway.app.state.gateway
    key = state.keys.new_internal_key("fenced")
    try:
        with httpx.Client(base_url=gateway.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
            _assert_not_found(c.post("/v1/chat/completions", json={"model": "tiny", **CHAT}), "tiny")
    finally:
        state.keys.drop_internal_key(key)


def _config(tenant: dict) -> dict:
    return {"models": [{"name": "m1", "kind": "upstream", "litellm_model": "openai/x"},
                       {"name": "m2", "kind": "upstream", "litellm_model": "openai/y"}],
            "tenants": [{"name": "t", "api_key_sha256": [key_digest("k")], **tenant}]}


def test_the_config_reads_models_in_order_once_each_and_refuses_unserved_empty_or_odd_lists():
    config = parse_config(_config({"models": ["m2", "m1", "m2"]}))
    assert config.tenants[0].models == ("m2", "m1") and config.tenant_models == {"t": frozenset({"m1", "m2"})}
    assert parse_config(_config({})).tenants[0].models is None and parse_config(_config({})).tenant_models == {}
    with pytest.raises(ConfigError, match=r"tenants\[0\]\.models names 'm3', which no \[\[models\]\] entry serves "
                                          r"\(served: 'm1', 'm2'\)"):
        parse_config(_config({"models": ["m1", "m3"]}))
    with pytest.raises(ConfigError, match=r"tenants\[0\]\.models is empty"):
        parse_config(_config({"models": []}))
    for odd in ("m1", [1], [""], ["  "]):
        with pytest.raises(ConfigError, match=r"tenants\[0\]\.models must be"):
            parse_config(_config({"models": odd}))


def test_a_reload_applies_a_tenants_models_at_once():

    models = (UpstreamModelConfig(name="m1", litellm_model="openai/x"),
              UpstreamModelConfig(name="m2", litellm_model="openai/y"))
    config = GatewayConfig(models=models, tenants=(TenantConfig("t", (key_digest("k"),)),),
                           responses_db=":memory:")
    state = build_app(config).state.gateway
    assert list(state.models_for("t")) == ["m1", "m2"] and state.backend("m2", "t").owned_by == "upstream"
    fenced = GatewayConfig(models=models, tenants=(TenantConfig("t", (key_digest("k"),), models=("m1",)),),
                           responses_db=":memory:")
    report = apply_tenants(state, fenced)
    assert report.changed == ("t",)
    assert list(state.models_for("t")) == ["m1"]
    with pytest.raises(ApiError) as caught:
        state.backend("m2", "t")
    assert caught.value.status == 404 and "'m2'" in caught.value.message and "serves: m1 " in caught.value.message


def test_health_shows_a_fenced_tenant_only_its_models(gateway):
    fenced = httpx.get(f"{gateway.base_url}/health", headers=gateway.headers("fenced"), timeout=30).json()
    assert sorted(fenced["models"]) == sorted(FENCED_MODELS)
    anyone = httpx.get(f"{gateway.base_url}/health", timeout=30).json()
    assert "tiny" in anyone["models"]   # readiness for a probe without a key: every model's
