"""Shared servers for the gateway tests: started once per session, on 127.0.0.1.

`gateway_server` serves the tiny local model ("tiny", two real worker processes), an
upstream model answered by litellm's `mock_response` ("mock"), and an upstream model
behind a fake OpenAI-compatible server reached through `api_base`, via litellm ("fake")
and forwarded directly ("fake-direct", `passthrough = true`). Tenants
with different limits keep the tests that exhaust limits away from the rest; "ops" is the
admin (sees every tenant's metrics and traces); "offline" is served in the flex tier;
"fenced" may use only FENCED_MODELS.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from gateway.app import build_app  # noqa: E402
from gateway.config import key_digest, parse_config  # noqa: E402
from tests.conftest import ServedGateway  # noqa: E402
from tests.gateway import fake_openai  # noqa: E402
from tests.gateway.serving import RunningServer, start_server  # noqa: E402

KEYS = {"alpha": "sk-test-alpha", "beta": "sk-test-beta", "rpm": "sk-test-rpm",
        "conc": "sk-test-conc", "budget": "sk-test-budget", "tpm": "sk-test-tpm",
        "cancel": "sk-test-cancel", "ops": "sk-test-ops", "paced": "sk-test-paced", "offline": "sk-test-offline",
        "faults": "sk-test-faults", "embed_budget": "sk-test-embed-budget", "fenced": "sk-test-fenced"}
LIMITS = {"rpm": {"requests_per_minute": 3},
          "conc": {"max_concurrent": 1, "max_queued": 1},
          "budget": {"token_budget": 400},   # test_tenancy spends it all
          "embed_budget": {"token_budget": 400},   # test_embeddings charges it, in any order
          "tpm": {"tokens_per_minute": 600},
          "cancel": {"max_concurrent": 1, "max_queued": 4},
          "paced": {"requests_per_minute": 1000, "tokens_per_minute": 100000}}
MAX_BODY_BYTES = 256 * 1024
FENCED_MODELS = ["mock", "fake"]   # the only models tenant "fenced" may use (test_tenant_models)


@dataclass(slots=True)
class Gateway(ServedGateway):
    def headers(self, tenant: str = "alpha") -> dict:
        return {"Authorization": f"Bearer {KEYS[tenant]}"}


def gateway_config(fake_base_url: str):
    return parse_config({
        "server": {"max_body_bytes": MAX_BODY_BYTES, "queue_timeout_s": 20},
        "models": [
            {"name": "tiny", "kind": "local", "path": "tiny", "num_workers": 2},
            {"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
             "litellm_params": {"mock_response": "Hello from the mock upstream"}},
            {"name": "fake", "kind": "upstream", "litellm_model": "openai/fake-model",
             "api_base": f"{fake_base_url}/v1", "api_key_env": "STEPAHEAD_TEST_FAKE_KEY"},
            {"name": "fake-direct", "kind": "upstream", "litellm_model": "openai/fake-model",
             "api_base": f"{fake_base_url}/v1", "api_key_env": "STEPAHEAD_TEST_FAKE_KEY",
             "passthrough": True},
        ],
        "tenants": [{"name": name, "api_key_sha256": [key_digest(key)],
                     "limits": LIMITS.get(name, {}), "admin": name == "ops",
                     "service_tier": "flex" if name == "offline" else "default",
                     **({"models": FENCED_MODELS} if name == "fenced" else {})} for name, key in KEYS.items()],
    })


@pytest.fixture(scope="session")
def fake_upstream() -> RunningServer:
    """The fake OpenAI upstream of the session; its stop cuts the "hang" answers timeout
    tests left sleeping at once (a graceful shutdown would wait 5 s for them)."""
    server = start_server(fake_openai.app, shutdown_timeout_s=0.1)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gateway(fake_upstream: RunningServer) -> Gateway:
    os.environ["STEPAHEAD_TEST_FAKE_KEY"] = "sk-upstream-secret"
    app = build_app(gateway_config(fake_upstream.base_url))
    server = start_server(app, startup_timeout_s=300)
    yield Gateway(server, app)
    server.stop()
