"""Tenants over HTTP: limits under concurrency, budgets, cache isolation, metrics."""
import asyncio
import re

import httpx
from prometheus_client.parser import text_string_to_metric_families

USER = [{"role": "user", "content": "Tell me a long story about caches."}]


async def fire(gateway, tenant: str, bodies: list[dict]) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=120) as client:
        return await asyncio.gather(*(client.post("/v1/chat/completions", json=body,
                                                  headers=gateway.headers(tenant))
                                      for body in bodies))


def codes(responses) -> list:
    return sorted((r.status_code, r.json()["error"]["code"] if r.status_code != 200 else "")
                  for r in responses)


async def test_concurrency_limit_admits_running_plus_queued_only(gateway):
    body = {"model": "tiny", "messages": USER, "max_tokens": 300, "temperature": 0}
    responses = await fire(gateway, "conc", [body] * 6)
    assert codes(responses) == [(200, "")] * 2 + [(429, "rate_limit_exceeded")] * 4
    for response in responses:
        if response.status_code == 429:
            assert 1 <= int(response.headers["Retry-After"]) <= 60
    limiter = gateway.state.limiters["conc"]
    assert limiter.num_active == 0 and limiter.num_queued == 0


async def test_requests_per_minute_limit_is_exact_under_concurrency(gateway):
    body = {"model": "tiny", "messages": USER, "max_tokens": 1}
    responses = await fire(gateway, "rpm", [body] * 8)
    assert codes(responses) == [(200, "")] * 3 + [(429, "rate_limit_exceeded")] * 5
    retry_after = [int(r.headers["Retry-After"]) for r in responses if r.status_code == 429]
    assert all(1 <= s <= 60 for s in retry_after)
    # every answer says where the tenant's requests-per-minute bucket stands, as OpenAI's do
    assert {r.headers["x-ratelimit-limit-requests"] for r in responses} == {"3"}
    assert {r.headers["x-ratelimit-remaining-requests"] for r in responses if r.status_code == 429} == {"0"}
    assert all(r.headers["x-ratelimit-reset-requests"].endswith("s") for r in responses)
    assert not any("x-ratelimit-limit-tokens" in r.headers for r in responses)   # no tokens-per-minute limit
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=120) as client:   # streamed, embedded, none
        async with client.stream("POST", "/v1/chat/completions", headers=gateway.headers("paced"),
                                 json={"model": "mock", "messages": USER, "stream": True}) as streamed:
            assert streamed.status_code == 200 and streamed.headers["x-ratelimit-limit-tokens"] == "100000"
            assert 998 <= int(streamed.headers["x-ratelimit-remaining-requests"]) <= 1000   # refills 16.7/s
        embedded = await client.post("/v1/embeddings", headers=gateway.headers("paced"),
                                     json={"model": "fake", "input": "caches"})
        unlimited = await client.post("/v1/chat/completions", headers=gateway.headers("alpha"),
                                      json={"model": "mock", "messages": USER})
    assert unlimited.status_code == 200 and not any(h.startswith("x-ratelimit") for h in unlimited.headers)
    assert embedded.status_code == 200 and embedded.headers["x-ratelimit-limit-requests"] == "1000"


async def test_tokens_per_minute_reserves_max_tokens(gateway):
    too_big = {"model": "tiny", "messages": USER, "max_tokens": 700}
    [response] = await fire(gateway, "tpm", [too_big])
    assert response.status_code == 429 and response.headers["x-should-retry"] == "false"
    body = {"model": "tiny", "messages": USER, "max_tokens": 200}
    responses = await fire(gateway, "tpm", [body] * 4)
    admitted = [r for r in responses if r.status_code == 200]
    assert len(admitted) == 2   # (prompt + 200) * 3 > 600 tokens per minute
    assert {r.json()["error"]["code"] for r in responses if r.status_code != 200} == {
        "rate_limit_exceeded"}


async def test_error_answers_carry_a_request_id_and_the_tenants_rate_limits(gateway):
    """A refused request is found by its id (the traced step's once it was prepared), and
    a limited tenant learns where its buckets stand from every answer, errors included."""
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=120) as client:
        bad = await client.post("/v1/chat/completions", headers=gateway.headers("paced"),
                                json={"model": "tiny", "messages": USER, "temperature": 9})
        bad_embedding = await client.post("/v1/embeddings", headers=gateway.headers("paced"), json={"model": "fake"})
        bad_response = await client.post("/v1/responses", headers=gateway.headers("paced"),
                                          json={"model": "tiny", "input": "x", "max_output_tokens": 0})
        queued = await client.post("/v1/responses", headers=gateway.headers("paced"),
                                   json={"model": "mock", "input": "x", "background": True})
        unknown_key = await client.post("/v1/chat/completions", headers={"Authorization": "Bearer sk-nobody"},
                                        json={"model": "tiny", "messages": USER})
    too_big = (await fire(gateway, "tpm", [{"model": "tiny", "messages": USER, "max_tokens": 700}]))[0]
    for answer in (bad, bad_embedding, bad_response):
        assert answer.status_code == 400 and answer.headers["x-request-id"].startswith("req")
        assert answer.headers["x-ratelimit-limit-requests"] == "1000"
    assert queued.status_code == 200 and queued.headers["x-request-id"] == queued.json()["id"]
    assert queued.headers["x-ratelimit-limit-tokens"] == "100000"
    assert unknown_key.status_code == 401 and unknown_key.headers["x-request-id"].startswith("req")
    assert not any(name.startswith("x-ratelimit") for name in unknown_key.headers)
    assert too_big.status_code == 429 and too_big.headers["x-request-id"].startswith("chatcmpl")   # prepared
    assert too_big.headers["x-ratelimit-limit-tokens"] == "600"


async def test_spent_budget_is_insufficient_quota(gateway):
    body = {"model": "tiny", "messages": USER, "max_tokens": 60}
    statuses = []
    for _ in range(10):
        [response] = await fire(gateway, "budget", [body])
        statuses.append(response.status_code)
        if response.status_code != 200:
            break
    assert statuses[-1] == 429 and statuses.count(200) >= 2
    error = response.json()["error"]
    assert error["code"] == "insufficient_quota" and error["type"] == "insufficient_quota"
    assert response.headers["x-should-retry"] == "false"
    limiter = gateway.state.limiters["budget"]
    assert limiter.num_spent_tokens <= limiter.limits.token_budget
    async with httpx.AsyncClient(base_url=gateway.base_url) as client:   # the tenant can watch it
        own = (await client.get("/metrics", headers=gateway.headers("budget"))).text
        other = (await client.get("/metrics", headers=gateway.headers("beta"))).text
    assert 'stepahead_tenant_token_budget{tenant="budget"} 400' in own
    assert f'stepahead_tenant_spent_tokens{{tenant="budget"}} {limiter.num_spent_tokens}' in own
    assert "stepahead_tenant_spent_tokens" not in other   # beta has no budget, and sees only itself


async def test_tenant_salts_cache_and_client_cache_salt_is_ignored(gateway):
    body = {"model": "tiny", "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "user", "content": "isolation probe " * 20}]}
    [first] = await fire(gateway, "alpha", [body])
    [again] = await fire(gateway, "alpha", [body])
    cached = again.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert first.status_code == 200 and cached > 0
    [other] = await fire(gateway, "beta", [dict(body, cache_salt="alpha")])
    assert other.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


async def test_metrics_endpoint_reports_per_tenant_and_worker(gateway):
    body = {"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "m" * 64}]}
    await fire(gateway, "beta", [body])
    await fire(gateway, "beta", [body])   # one after the other: the second hits the cache
    rejected = await fire(gateway, "rpm", [dict(body, max_tokens=1)] * 4)   # over 3 a minute
    assert any(r.status_code == 429 for r in rejected)
    assert gateway.state.tracer.flush(15)   # the steps reached the forecasters
    async with httpx.AsyncClient(base_url=gateway.base_url) as client:
        text = (await client.get("/metrics", headers=gateway.headers("ops"))).text
    assert re.search(r'stepahead_requests_total\{tenant="beta",model_name="tiny",'
                     r'endpoint="chat",status="200"\} \d+', text)
    hits = re.findall(r'vllm:prefix_cache_hits_total\{tenant="beta",model_name="tiny",'
                      r'worker="w\d"\} (\d+)', text)
    assert sum(int(h) for h in hits) > 0
    assert 'vllm:prefix_cache_queries_total{tenant="beta"' in text
    assert 'vllm:time_to_first_token_seconds_bucket{tenant="beta"' in text
    assert 'stepahead_rejected_total{tenant="rpm",code="rate_limit_exceeded"}' in text
    assert "sk-test" not in text
    assert 'stepahead_worker_info{model_name="tiny",worker="w0"} 1' in text
    assert 'stepahead_worker_counts_total{model_name="tiny",worker="w0",field="num_decoded_tokens"}' in text
    assert 'stepahead_worker_level{model_name="tiny",worker="w0",field="hot_num_used_blocks"}' in text
    # the default (predictive) policy's pins and prefetches since start, all tenants' together
    assert 'stepahead_worker_counts_total{model_name="tiny",worker="w0",field="num_pins_set"}' in text
    assert 'stepahead_worker_counts_total{model_name="tiny",worker="w0",field="num_prefetches_wasted"}' in text
    routed = re.findall(r'stepahead_router_counts_total\{model_name="tiny",field="num_routed_\w+"\} (\d+)', text)
    assert sum(int(n) for n in routed) >= 2
    assert 'stepahead_router_counts_total{model_name="tiny",field="num_session_moves"}' in text
    assert 'stepahead_router_info{model_name="tiny"} 1' in text
    predicted = re.search(r'stepahead_forecasts_total\{source="predictor"\} (\d+)', text)
    assert predicted and int(predicted.group(1)) >= 1   # the traced chat steps were forecast
    assert 'stepahead_forecaster_checkpoints_total{outcome="failed"} 0' in text
    steps = re.search(r'^stepahead_trace_steps_total (\d+)$', text, re.MULTILINE)
    assert steps and int(steps.group(1)) >= 1   # the trace writer's counts, for admins
    assert 'stepahead_trace_errors_total{kind="store"} 0' in text and "# TYPE stepahead_trace_dropped_events_total counter" in text
    assert "\nstepahead_response_archive_errors_total 0\n" in text
    families = list(text_string_to_metric_families(text))   # as Prometheus' text format 0.0.4 reads it
    untyped = [family.name for family in families if family.type == "unknown" or not family.samples]
    assert families and not untyped, untyped
    assert {f.name: f.type for f in families}["stepahead_requests"] == "counter"


async def test_metrics_show_a_tenant_only_its_own_series(gateway):
    body = {"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "n" * 64}]}
    await fire(gateway, "beta", [body])
    await fire(gateway, "alpha", [body])
    async with httpx.AsyncClient(base_url=gateway.base_url) as client:
        text = (await client.get("/metrics", headers=gateway.headers("beta"))).text
        anonymous = await client.get("/metrics")
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert series and all('tenant="beta"' in line for line in series)
    assert 'vllm:prompt_tokens_total{tenant="beta"' in text
    assert "alpha" not in text and "stepahead_worker_" not in text and "stepahead_router_" not in text
    assert "stepahead_worker_tenant_" not in text   # its pinned or reserved blocks: workers' gauges, admins'
    assert "stepahead_trace_" not in text   # the writer's counts mix every tenant's traffic
    assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "invalid_api_key"


async def test_health_shows_workers_to_an_admin_and_readiness_to_anyone(gateway):
    async with httpx.AsyncClient(base_url=gateway.base_url) as client:
        admin = (await client.get("/health", headers=gateway.headers("ops"))).json()
        tenant = await client.get("/health", headers=gateway.headers("beta"))
        anonymous = await client.get("/health")
        bad_key = await client.get("/health", headers={"authorization": "Bearer nope"})
    assert admin["status"] == "ok"
    assert set(admin["models"]["tiny"]["workers"]) == {"w0", "w1"}
    from gateway.version import installed_version
    assert admin["version"] == installed_version() != "unknown"
    for response in (tenant, anonymous):
        body = response.json()
        assert response.status_code == 200 and body["status"] == "ok" and "version" not in body
        assert body["models"].keys() == admin["models"].keys()
        assert all(model == {"ready": True} for model in body["models"].values())
    assert bad_key.status_code == 401 and bad_key.json()["error"]["code"] == "invalid_api_key"


async def test_health_is_503_unavailable_while_a_started_models_workers_are_all_down(gateway, monkeypatch):
    backend = gateway.app.state.gateway.backends["tiny"]
    down = {**backend.health(), "ready": False}   # as when every worker is fenced and restarting
    monkeypatch.setattr(type(backend), "health", lambda self: down)   # slotted: patched on its class
    async with httpx.AsyncClient(base_url=gateway.base_url) as client:
        anonymous = await client.get("/health")
    assert anonymous.status_code == 503
    assert anonymous.json() == {"status": "unavailable",
                                "models": {"tiny": {"ready": False}, "mock": {"ready": True},
                                           "fake": {"ready": True}, "fake-direct": {"ready": True}}}
