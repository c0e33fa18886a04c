"""The OpenTelemetry GenAI model-server histograms on `/metrics` (gateway/metrics_genai.py):
the conventions' names (Prometheus mapping), labels and bucket boundaries, and known
answers from real requests checked against their traced steps."""
from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from agents_trace import semconv as sc
from gateway.metrics import Registry
from gateway.metrics_genai import (REQUEST_DURATION, REQUEST_DURATION_BUCKETS_S, TIME_PER_OUTPUT_TOKEN,
                                   TIME_PER_OUTPUT_TOKEN_BUCKETS_S, TIME_TO_FIRST_TOKEN,
                                   TIME_TO_FIRST_TOKEN_BUCKETS_S, genai_labels, record_server_request)

# docs/gen-ai/gen-ai-metrics.md, "Generative AI model server metrics": ExplicitBucketBoundaries
CONVENTIONS_BUCKETS = {
    "gen_ai_server_request_duration_seconds":
        [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92],
    "gen_ai_server_time_to_first_token_seconds":
        [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0],
    "gen_ai_server_time_per_output_token_seconds":
        [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5],
}


def test_names_and_buckets_are_the_conventions():
    assert (REQUEST_DURATION, TIME_TO_FIRST_TOKEN, TIME_PER_OUTPUT_TOKEN) == tuple(CONVENTIONS_BUCKETS)
    assert [list(REQUEST_DURATION_BUCKETS_S), list(TIME_TO_FIRST_TOKEN_BUCKETS_S),
            list(TIME_PER_OUTPUT_TOKEN_BUCKETS_S)] == list(CONVENTIONS_BUCKETS.values())


def test_a_success_renders_three_histograms_with_the_conventions_labels_and_bounds():
    registry = Registry()
    record_server_request(registry, tenant="a", endpoint="chat", model="m", duration_s=0.53, ttft_s=0.03,
                          num_output_tokens=11)
    text = registry.render(tenant="a")
    labels = f'tenant="a",gen_ai_operation_name="chat",gen_ai_provider_name="{sc.PROVIDER}",gen_ai_request_model="m"'
    for name, bounds in CONVENTIONS_BUCKETS.items():
        assert f"# TYPE {name} histogram" in text and f"# HELP {name} " in text
        rendered = [line.split('le="')[1].split('"')[0] for line in text.splitlines()
                    if line.startswith(f"{name}_bucket{{{labels},")]
        assert rendered == [repr(b) if not float(b).is_integer() else str(int(b)) for b in bounds] + ["+Inf"]
        assert f"{name}_count{{{labels}}} 1" in text
    assert f'gen_ai_server_request_duration_seconds_bucket{{{labels},le="0.32"}} 0' in text
    assert f'gen_ai_server_request_duration_seconds_bucket{{{labels},le="0.64"}} 1' in text
    assert f'gen_ai_server_time_to_first_token_seconds_bucket{{{labels},le="0.04"}} 1' in text
    assert f"gen_ai_server_request_duration_seconds_sum{{{labels}}} 0.53" in text
    assert f"gen_ai_server_time_to_first_token_seconds_sum{{{labels}}} 0.03" in text
    # (0.53 - 0.03) / (11 - 1): the rest of the duration over the tokens after the first
    assert registry.histograms[(TIME_PER_OUTPUT_TOKEN, genai_labels("a", "chat", "m"))].total == pytest.approx(0.05)
    assert 'error_type=' not in text


def test_a_failure_counts_its_duration_with_error_type_and_no_token_timings():
    registry = Registry()
    record_server_request(registry, tenant="a", endpoint="completions", model="m", duration_s=0.2,
                          error_type="context_length_exceeded", ttft_s=0.1, num_output_tokens=5)
    text = registry.render(tenant="a")
    assert (f'gen_ai_server_request_duration_seconds_count{{tenant="a",gen_ai_operation_name="text_completion",'
            f'gen_ai_provider_name="{sc.PROVIDER}",gen_ai_request_model="m",error_type="context_length_exceeded"}} 1'
            in text)
    assert TIME_TO_FIRST_TOKEN not in text and TIME_PER_OUTPUT_TOKEN not in text


@pytest.mark.parametrize("num_output_tokens", [0, 1])
def test_time_per_output_token_needs_a_token_after_the_first(num_output_tokens):
    registry = Registry()
    record_server_request(registry, tenant="a", endpoint="responses", model="m", duration_s=0.2, ttft_s=0.1,
                          num_output_tokens=num_output_tokens)
    assert {name for name, _ in registry.histograms} == {REQUEST_DURATION, TIME_TO_FIRST_TOKEN}
    assert ("gen_ai_operation_name", "chat") in next(iter(registry.histograms))[1]   # Responses: a chat


# --- known answers from the running gateway, against the traced steps ---

def _histogram(gateway, name: str, tenant: str, model: str, endpoint: str = "chat",
               error_type: str | None = None) -> tuple[int, float]:
    labels = genai_labels(tenant, endpoint, model) + ((("error_type", error_type),) if error_type else ())
    histogram = gateway.state.metrics.histograms.get((name, labels))
    return (0, 0.0) if histogram is None else (histogram.num_observations, histogram.total)


async def _wait_for(predicate, timeout_s: float = 10.0) -> None:
    deadline_s = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline_s, "not recorded in time"
        await asyncio.sleep(0.02)


async def _step(gateway, tenant: str, session: str) -> dict:
    from agents_trace.step_queries import list_steps

    tracer = gateway.state.tracer
    deadline_s = time.monotonic() + 15
    while not (steps := list_steps(tracer.store_path, tenant, session)["data"]):
        assert time.monotonic() < deadline_s, "the step was not traced"
        tracer.flush(1)
        await asyncio.sleep(0.05)
    (step,) = steps
    return step


@pytest.mark.parametrize("stream", [False, True])
async def test_a_chat_request_records_duration_ttft_and_time_per_token_as_its_step(gateway, stream):
    tenant, session = "paced", f"genai-{stream}-{time.monotonic_ns()}"
    before = {name: _histogram(gateway, name, tenant, "tiny") for name in CONVENTIONS_BUCKETS}
    body = {"model": "tiny", "max_tokens": 12, "ignore_eos": True, "stream": stream,
            "messages": [{"role": "user", "content": "Count to ten."}]}
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
        response = await client.post("/v1/chat/completions", json=body,
                                     headers={**gateway.headers(tenant), "x-session-id": session})
        assert response.status_code == 200, response.text
    await _wait_for(lambda: _histogram(gateway, REQUEST_DURATION, tenant, "tiny")[0] == before[REQUEST_DURATION][0] + 1)
    after = {name: _histogram(gateway, name, tenant, "tiny") for name in CONVENTIONS_BUCKETS}
    delta = {name: (after[name][0] - before[name][0], after[name][1] - before[name][1]) for name in after}
    assert [count for count, _ in delta.values()] == [1, 1, 1]
    duration_s, ttft_s, per_token_s = (total for _, total in delta.values())
    step = await _step(gateway, tenant, session)
    assert step["error"] is None and step["num_output_tokens"] == 12
    assert ttft_s == pytest.approx(step["ttft_s"], abs=1e-6)   # the same first event as the trace's
    assert 0 < ttft_s <= duration_s <= step["ended_s"] - step["arrived_s"] + 0.5
    assert per_token_s == pytest.approx((duration_s - ttft_s) / (12 - 1), rel=1e-6)
    assert _histogram(gateway, REQUEST_DURATION, tenant, "tiny", error_type="client_closed") == (0, 0.0)


def _post(gateway, body: dict, tenant: str, path: str = "/v1/chat/completions") -> httpx.Response:
    with httpx.Client(base_url=gateway.base_url, timeout=60) as client:
        return client.post(path, headers=gateway.headers(tenant), content=json.dumps(body))


def _counts(gateway) -> dict:
    """Every histogram's (observations, sum) now (the registry's own change in place)."""
    return {key: (h.num_observations, h.total) for key, h in list(gateway.state.metrics.histograms.items())}


def _new_observations(gateway, before: dict, name: str, labels) -> tuple[int, float]:
    count, total = _counts(gateway).get((name, labels), (0, 0.0))
    old_count, old_total = before.get((name, labels), (0, 0.0))
    return count - old_count, total - old_total


@pytest.mark.parametrize(("model", "text", "status"), [
    ("tiny", "x" * 9000, 400),   # context_length_exceeded before its model ran (routes.py)
    ("fake", "status:400", 400),   # the upstream's context_length_exceeded, in `respond`
    ("fake", "status:500", 502),   # the upstream failed
], ids=["local-context-too-long", "upstream-context-too-long", "upstream-500"])
def test_a_failed_request_counts_once_in_request_duration_with_its_error_type(gateway, model, text, status):
    tenant = "paced"
    before = _counts(gateway)
    response = _post(gateway, {"model": model, "messages": [{"role": "user", "content": text}]}, tenant)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    error_type = error["code"] or error["type"]   # as its client was told
    if status == 400:
        assert error_type == "context_length_exceeded"
    labels = genai_labels(tenant, "chat", model)
    count, total_s = _new_observations(gateway, before, REQUEST_DURATION, labels + (("error_type", error_type),))
    assert count == 1 and total_s > 0
    for name in CONVENTIONS_BUCKETS:   # no success, no first token counted
        assert _new_observations(gateway, before, name, labels) == (0, 0.0)


async def test_a_stream_that_failed_after_its_header_counts_its_error(gateway):
    tenant = "paced"
    before = _counts(gateway)
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
        response = await client.post("/v1/chat/completions", headers=gateway.headers(tenant), json={
            "model": "fake", "stream": True, "messages": [{"role": "user", "content": "midstream-error"}]})
    assert response.status_code == 200
    event = json.loads(next(line for line in response.text.splitlines() if '"error"' in line).removeprefix("data: "))
    labels = genai_labels(tenant, "chat", "fake")
    failed = labels + (("error_type", event["error"]["code"] or event["error"]["type"]),)
    await _wait_for(lambda: _new_observations(gateway, before, REQUEST_DURATION, failed)[0] == 1)
    for name in CONVENTIONS_BUCKETS:   # its first chunk came, but it did not succeed
        assert _new_observations(gateway, before, name, labels) == (0, 0.0)


def test_completions_and_responses_name_their_operation(gateway):
    tenant = "paced"
    before = (_histogram(gateway, REQUEST_DURATION, tenant, "tiny", "completions")[0],
              _histogram(gateway, REQUEST_DURATION, tenant, "tiny", "responses")[0])
    completion = {"model": "tiny", "prompt": "hi", "max_tokens": 3}
    assert _post(gateway, completion, tenant, "/v1/completions").status_code == 200
    assert _post(gateway, {"model": "tiny", "input": "hi", "max_output_tokens": 16, "store": False}, tenant,
                 "/v1/responses").status_code == 200
    labels = dict(genai_labels(tenant, "completions", "tiny"))
    assert labels["gen_ai_operation_name"] == "text_completion"
    assert dict(genai_labels(tenant, "responses", "tiny"))["gen_ai_operation_name"] == "chat"
    assert (_histogram(gateway, REQUEST_DURATION, tenant, "tiny", "completions")[0],
            _histogram(gateway, REQUEST_DURATION, tenant, "tiny", "responses")[0]) == (before[0] + 1, before[1] + 1)


def test_a_tenants_scrape_shows_its_own_genai_series_only(gateway):
    body = {"model": "mock", "messages": [{"role": "user", "content": "hi"}]}
    for tenant in ("beta", "paced"):
        assert _post(gateway, body, tenant).status_code == 200
    with httpx.Client(base_url=gateway.base_url, timeout=60) as client:
        mine = client.get("/metrics", headers=gateway.headers("beta")).text
        everyone = client.get("/metrics", headers=gateway.headers("ops")).text
    genai = [line for line in mine.splitlines() if line.startswith("gen_ai_server_")]
    assert genai and all('tenant="beta"' in line for line in genai)
    assert any(line.startswith("gen_ai_server_request_duration_seconds_count{") and 'tenant="paced"' in line
               for line in everyone.splitlines())
