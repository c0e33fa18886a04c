"""Refusals of a tenant. One over a limit that needs no token count (requests/minute; concurrency with a full
queue) is refused before its prompt is prepared (`TenantLimiter.early_refusal`), answered
and counted exactly as the limiter's own refusal after preparation, and traced; the early
check never refuses what the full one would admit, nor differently. The model's queue
for the tenant refusing a request counts as a refusal of the tenant too."""
from __future__ import annotations

import httpx
import pytest

from gateway.app import build_app
from gateway.config import LimitsConfig, key_digest, parse_config
from gateway.limits import TenantLimiter
from gateway.engine_streams import error_from_event
from gateway.routes import max_reservation
from gateway.upstream import UpstreamBackend
from shards.protocol import ErrorEvent
from tests.gateway.serving import start_server

KEYS = {"rpm1": "sk-early-rpm1", "busy": "sk-early-busy", "busy_tpm": "sk-early-busy-tpm", "free": "sk-early-free"}
LIMITS = {"rpm1": {"requests_per_minute": 1},
          "busy": {"max_concurrent": 1, "max_queued": 0},
          "busy_tpm": {"max_concurrent": 1, "max_queued": 0, "tokens_per_minute": 100000},
          "free": {}}
BODY = {"model": "mock", "messages": [{"role": "user", "content": "Say something."}], "max_tokens": 4}
SAME_HEADERS = ("retry-after", "x-ratelimit-limit-requests", "x-ratelimit-remaining-requests",
                "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "content-type")


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    store = tmp_path_factory.mktemp("early") / "traces.sqlite3"
    config = parse_config({
        "models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                    "litellm_params": {"mock_response": "hi"}}],
        "tenants": [{"name": name, "api_key_sha256": [key_digest(key)], "limits": LIMITS[name]}
                    for name, key in KEYS.items()],
        "tracing": {"store_path": str(store)},
    })
    app = build_app(config)
    server = start_server(app)
    yield server, app.state.gateway
    server.stop()


@pytest.fixture
def prepared_count(monkeypatch):
    """How many chat requests the upstream backend prepared (rendered and counted)."""
    count = {"n": 0}
    original = UpstreamBackend.prepare_chat

    async def prepare_chat(self, request, tenant, request_id):
        count["n"] += 1
        return await original(self, request, tenant, request_id)

    monkeypatch.setattr(UpstreamBackend, "prepare_chat", prepare_chat)
    return count


def post(server, tenant: str, body: dict = BODY) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {KEYS[tenant]}"}, timeout=30)


def rejected(server, tenant: str) -> float:
    text = httpx.get(f"{server.base_url}/metrics", headers={"Authorization": f"Bearer {KEYS[tenant]}"},
                     timeout=30).text
    for line in text.splitlines():
        if line.startswith(f'stepahead_rejected_total{{tenant="{tenant}",code="rate_limit_exceeded"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def full_check_answer(server, tenant: str, monkeypatch, body: dict = BODY) -> httpx.Response:
    """The answer when the early check is skipped: the limiter's refusal after preparation."""
    with monkeypatch.context() as patched:
        patched.setattr(TenantLimiter, "early_refusal", lambda self, max_num_tokens: None, raising=False)
        return post(server, tenant, body)


def assert_same_refusal(early: httpx.Response, full: httpx.Response) -> None:
    assert early.status_code == full.status_code == 429
    assert early.json() == full.json()
    for name in SAME_HEADERS:
        if name == "retry-after":   # the wait, counted down between the two answers (a loaded machine: a second)
            assert 0 <= int(full.headers[name]) - int(early.headers[name]) <= 1
            continue
        assert early.headers.get(name) == full.headers.get(name), name
    for answer in (early, full):   # a traced step, as a refused prepared request's
        assert answer.headers["x-request-id"].startswith("chatcmpl")
        assert answer.headers.get("x-session-id")


def test_an_exhausted_requests_per_minute_is_refused_before_the_prompt_is_prepared(served, prepared_count,
                                                                                   monkeypatch):
    server, state = served
    assert post(server, "rpm1").status_code == 200
    assert prepared_count["n"] == 1
    full = full_check_answer(server, "rpm1", monkeypatch)
    assert prepared_count["n"] == 2 and rejected(server, "rpm1") == 1
    early = post(server, "rpm1", {**BODY, "stream": True, "n": 2})
    assert prepared_count["n"] == 2, "an early refusal rendered and counted the prompt"
    assert_same_refusal(early, full)
    assert rejected(server, "rpm1") == 2
    limiter = state.limiters["rpm1"]
    assert limiter.num_active == 0 and limiter.num_queued == 0 and limiter.num_reserved_tokens == 0


@pytest.mark.parametrize("tenant", ["busy", "busy_tpm"])
def test_a_full_concurrency_and_queue_is_refused_before_the_prompt_is_prepared(served, prepared_count,
                                                                               monkeypatch, tenant):
    """For an upstream model no reservation bound is known: with a tokens/minute limit,
    which `acquire` checks before the queue, the early check leaves it to `acquire`."""
    server, state = served
    limiter = state.limiters[tenant]
    limiter.num_active = 1   # a request running: no slot, and no queue
    try:
        full = full_check_answer(server, tenant, monkeypatch)
        early = post(server, tenant)
    finally:
        limiter.num_active = 0
    assert_same_refusal(early, full)
    assert prepared_count["n"] == (2 if tenant == "busy_tpm" else 1)
    assert rejected(server, tenant) == 2
    assert post(server, tenant).status_code == 200   # the slot is free again: admitted


def limiter(clock: Clock, **limits) -> TenantLimiter:
    return TenantLimiter("t", LimitsConfig(**limits), clock=clock)


async def test_the_early_check_refuses_only_what_acquire_refuses_the_same_way():
    clock = Clock()
    rpm = limiter(clock, requests_per_minute=1)
    assert rpm.early_refusal(None) is None
    ticket = await rpm.acquire(10)
    early = rpm.early_refusal(None)
    with pytest.raises(Exception) as full:
        await rpm.acquire(10)
    assert early is not None and early.body() == full.value.body() and early.headers == full.value.headers
    rpm.release(ticket, 10)

    queue = limiter(clock, max_concurrent=1, max_queued=0, tokens_per_minute=1000)
    ticket = await queue.acquire(100)
    assert queue.early_refusal(None) is None   # tokens/minute may refuse it first
    assert queue.early_refusal(2000) is None   # above the bucket's size: tokens/minute refuses it
    assert queue.early_refusal(901) is None    # more than is left: tokens/minute refuses it
    early = queue.early_refusal(900)
    with pytest.raises(Exception) as full:
        await queue.acquire(900)
    assert early is not None and early.body() == full.value.body() and early.headers == full.value.headers
    queue.release(ticket, 100)
    assert queue.early_refusal(900) is None    # a free slot: admitted

    budget = limiter(clock, requests_per_minute=1, token_budget=100)
    budget.release(await budget.acquire(95), 95)
    assert budget.early_refusal(None) is None   # the budget, checked first, may refuse it first
    assert budget.early_refusal(6) is None
    assert budget.early_refusal(5).message.startswith("Rate limit reached")


def test_a_local_chat_requests_reservation_is_bounded_by_its_context():
    class Engine:
        max_context_tokens = 2048

    class Local:
        owned_by, engine = "stepahead", Engine()

    class Upstream:
        owned_by = "openai"

    assert max_reservation(Local(), 8, is_chat=True) == 8 * 2048
    assert max_reservation(Local(), None, is_chat=True) == 2048
    assert max_reservation(Local(), 1, is_chat=False) is None
    assert max_reservation(Upstream(), 1, is_chat=True) is None


def test_a_request_the_models_queue_for_its_tenant_refuses_counts_as_rejected(served, monkeypatch):
    async def run(self, prepared):
        raise error_from_event(ErrorEvent(prepared.request_id, "tenant 'free' has 256 queued", "rate_limit_exceeded",
                                          retry_after_s=2.0))
        yield   # an async generator, as a backend's run is

    monkeypatch.setattr(UpstreamBackend, "run", run)
    server, _ = served
    for body in (BODY, {**BODY, "stream": True}):
        answer = post(server, "free", body)
        assert answer.status_code == 429 and answer.headers["retry-after"] == "2"
        assert answer.json()["error"]["code"] == "rate_limit_exceeded"
    text = httpx.get(f"{server.base_url}/metrics", headers={"Authorization": f"Bearer {KEYS['free']}"},
                     timeout=30).text
    assert 'stepahead_requests_total{tenant="free",model_name="mock",endpoint="chat",status="429"} 2' in text
    assert rejected(server, "free") == 2
