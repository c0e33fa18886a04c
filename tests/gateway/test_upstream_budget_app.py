"""Through the app (gateway/model_backends.py `build_backend` passes `Limiters.budget_room` to upstream
backends): a budgeted tenant's open-ended upstream completion is sent its share of the
budget as `max_tokens`, and spends no more than the budget; `best_of` candidates are
reserved, so a request they would take past the budget is a 429 (QA74 r1, r8)."""
import json

import httpx
import pytest

from gateway.app import build_app
from gateway.config import key_digest, parse_config
from gateway.upstream import estimate_num_tokens
from tests.conftest import ServedGateway
from tests.gateway.fake_openai import request_body
from tests.gateway.serving import start_server

MODELS = ("via-litellm", "via-passthrough")
PROMPT = "Once upon a time there was"


async def greedy_upstream(scope, receive, send) -> None:
    """Text completions that use every token asked for: `max_tokens` (else 5,000) per
    `best_of` candidate; the text is the body it was sent."""
    raw = await request_body(scope, receive, send)
    if raw is None:
        return
    body = json.loads(raw)
    used = (body.get("max_tokens") or 5000) * (body.get("best_of") or 1)
    reply = {"id": "cmpl-g", "object": "text_completion", "created": 1, "model": "up",
             "choices": [{"index": 0, "text": json.dumps(body), "logprobs": None, "finish_reason": "length"}],
             "usage": {"prompt_tokens": 7, "completion_tokens": used, "total_tokens": 7 + used}}
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps(reply).encode()})


@pytest.fixture(scope="module")
def gateway():
    upstream = start_server(greedy_upstream)
    model = {"kind": "upstream", "litellm_model": "openai/up", "api_base": f"{upstream.base_url}/v1"}
    tenants = [{"name": f"{kind}-{model}", "api_key_sha256": [key_digest(f"sk-{kind}-{model}")],
                "limits": {"token_budget": 300}} for kind in ("open", "best") for model in MODELS]
    config = parse_config({"models": [{"name": "via-litellm", **model},
                                      {"name": "via-passthrough", **model, "passthrough": True}],
                           "tenants": tenants})
    app = build_app(config)
    server = start_server(app)
    yield ServedGateway(server, app)
    server.stop()
    upstream.stop()


def _complete(gateway, key: str, **fields) -> httpx.Response:
    return httpx.post(f"{gateway.base_url}/v1/completions", timeout=30, headers={"Authorization": f"Bearer {key}"},
                      json={"prompt": PROMPT, **fields})


@pytest.mark.parametrize("model", MODELS)
def test_an_open_ended_completion_spends_no_more_than_the_budget(gateway, model):
    reply = _complete(gateway, f"sk-open-{model}", model=model, max_tokens=None)
    assert reply.status_code == 200, reply.text
    sent = json.loads(reply.json()["choices"][0]["text"])
    assert sent["max_tokens"] == 300 - estimate_num_tokens(PROMPT)
    assert gateway.state.limiters[f"open-{model}"].num_spent_tokens <= 300


@pytest.mark.parametrize("model", MODELS)
def test_best_of_past_the_budget_is_refused(gateway, model):
    reply = _complete(gateway, f"sk-best-{model}", model=model, max_tokens=60, best_of=10)
    assert reply.status_code == 429 and reply.json()["error"]["code"] == "insufficient_quota", reply.text
    assert gateway.state.limiters[f"best-{model}"].num_spent_tokens == 0
