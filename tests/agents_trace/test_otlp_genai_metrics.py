"""The GenAI server histograms over OTLP (agents_trace/otel_metrics.py, gateway/metrics_genai.py):
pushed beside the spans when OTLP export is on, with the conventions' names, unit, bucket
boundaries and attributes and the values `/metrics` shows; a collector that hangs slows
no request and the stop stays bounded; no OTLP, no meter provider."""
from __future__ import annotations

import socket
import time

import httpx
import pytest

from agents_trace import otel_setup
from agents_trace import semconv as sc
from agents_trace.config import TraceConfig, TraceConfigError
from agents_trace.otel_metrics import build_meter_provider, meter_provider_stop
from agents_trace.otel_setup import otlp_metrics_target, otlp_target
from gateway.app import build_app
from gateway.config import key_digest, parse_config
from gateway.metrics_genai import (REQUEST_DURATION, TIME_PER_OUTPUT_TOKEN, TIME_TO_FIRST_TOKEN, GenAiInstruments,
                                   GenAiRegistry, genai_labels, record_server_request)

from tests.agents_trace.otlp_receiver import Collected, http_receiver
from tests.gateway.serving import start_server

# docs/gen-ai/gen-ai-metrics.md, "Generative AI model server metrics"
CONVENTIONS = {
    "gen_ai.server.request.duration": (REQUEST_DURATION, [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56,
                                                          5.12, 10.24, 20.48, 40.96, 81.92]),
    "gen_ai.server.time_to_first_token": (TIME_TO_FIRST_TOKEN, [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                                                0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]),
    "gen_ai.server.time_per_output_token": (TIME_PER_OUTPUT_TOKEN, [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                                                                    0.4, 0.5, 0.75, 1.0, 2.5]),
}
KEY = "sk-otlp-metrics"
FAST_EXPORT = {"OTEL_METRIC_EXPORT_INTERVAL": "100"}   # milliseconds


def _points(collected: Collected) -> dict:
    """The last export's histogram points: {(metric name, attributes): (unit, point, resource attributes)}."""
    found = {}
    for request in collected.of("/v1/metrics"):
        for resource in request.resource_metrics:
            resource_attributes = {a.key: a.value.string_value for a in resource.resource.attributes}
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.histogram.data_points:
                        attributes = tuple(sorted((a.key, a.value.string_value) for a in point.attributes))
                        found[(metric.name, attributes)] = (metric.unit, point, resource_attributes)
    return found


def _attributes(labels) -> tuple:
    keys = {"tenant": sc.TENANT, "gen_ai_operation_name": sc.OPERATION_NAME, "gen_ai_provider_name": sc.PROVIDER_NAME,
            "gen_ai_request_model": sc.REQUEST_MODEL, "error_type": sc.ERROR_TYPE}
    return tuple(sorted((keys[label], value) for label, value in labels))


def _assert_as_registry(points: dict, registry: GenAiRegistry) -> int:
    """Every GenAI histogram of `registry` arrived with the conventions' name, unit and
    bounds, and the same count, sum and bucket counts; returns how many."""
    num_checked = 0
    for otel_name, (name, bounds) in CONVENTIONS.items():
        for (registry_name, labels), histogram in registry.histograms.items():
            if registry_name != name:
                continue
            unit, point, resource = points[(otel_name, _attributes(labels))]
            assert unit == "s" and list(point.explicit_bounds) == bounds
            assert point.count == histogram.num_observations and point.sum == pytest.approx(histogram.total)
            assert list(point.bucket_counts)[:-1] == histogram.counts
            assert resource["service.name"] == "stepahead"
            num_checked += 1
    return num_checked


def test_recorded_histograms_arrive_as_the_conventions_define_them():
    collected = Collected()
    server = http_receiver(collected)
    config = TraceConfig(otlp_endpoint=f"http://127.0.0.1:{server.server_address[1]}")
    provider = build_meter_provider(config, FAST_EXPORT)
    try:
        registry = GenAiRegistry(genai_otel=GenAiInstruments.of(provider.get_meter("t")))
        record_server_request(registry, tenant="a", endpoint="chat", model="m", duration_s=0.53, ttft_s=0.03,
                              num_output_tokens=11)
        record_server_request(registry, tenant="b", endpoint="completions", model="m", duration_s=0.2,
                              error_type="context_length_exceeded")
        meter_provider_stop(provider).shutdown()   # the final export
    finally:
        server.shutdown()
    points = _points(collected)
    assert _assert_as_registry(points, registry) == 4
    failed = dict(next(key for key in points if (sc.ERROR_TYPE, "context_length_exceeded") in key[1])[1])
    assert failed == {sc.TENANT: "b", sc.OPERATION_NAME: "text_completion", sc.PROVIDER_NAME: sc.PROVIDER,
                      sc.REQUEST_MODEL: "m", sc.ERROR_TYPE: "context_length_exceeded"}
    _, per_token, _ = next(v for (name, _), v in points.items() if name == "gen_ai.server.time_per_output_token")
    assert per_token.sum == pytest.approx((0.53 - 0.03) / 10)


@pytest.mark.parametrize("config, environ, expected", [
    (TraceConfig(), {}, None),                                                      # no OTLP: no metrics
    (TraceConfig(otlp_endpoint="http://c:4318/p?x=1"), {}, ("http/protobuf", "http://c:4318/p/v1/metrics?x=1")),
    (TraceConfig(otlp_endpoint="http://c:4317", otlp_protocol="grpc"), {}, ("grpc", "http://c:4317")),
    (TraceConfig(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ("http/protobuf", None)),
    (TraceConfig(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
                     "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc"}, ("grpc", None)),
    (TraceConfig(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
                     "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, ("grpc", None)),   # the spans' protocol
    (TraceConfig(), {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, None),
    (TraceConfig(), {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces",
                     "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://m:4318/v1/metrics"}, ("http/protobuf", None)),
    (TraceConfig(otlp_endpoint="http://c:4318"), {"OTEL_METRICS_EXPORTER": "none"}, None),
    (TraceConfig(otlp_endpoint="http://c:4318"), {"OTEL_TRACES_EXPORTER": "none"}, None),
])
def test_the_metrics_target_mirrors_the_spans(config, environ, expected):
    target = otlp_metrics_target(config, otlp_target(config, environ), environ)
    assert (None if target is None else (target.protocol, target.endpoint)) == expected
    if expected is None:
        assert build_meter_provider(config, environ) is None


@pytest.mark.parametrize("name, value", [("OTEL_METRIC_EXPORT_INTERVAL", "soon"),
                                         ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/json")])
def test_a_bad_metrics_variable_is_a_bad_config_before_the_start(name, value):
    with pytest.raises(TraceConfigError) as refused:
        otlp_target(TraceConfig(otlp_endpoint="http://c:4318"), {name: value})
    assert str(refused.value).startswith(f"{name} must be")


# --- through a served gateway ---

def _serve(tmp_path, endpoint: str | None):
    tracing = {"store_path": str(tmp_path / "traces.sqlite3"), "session_idle_timeout_s": 600}
    if endpoint is not None:
        tracing |= {"otlp_endpoint": endpoint, "otlp_export_timeout_s": 30.0}
    config = parse_config({
        "models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",   # no worker to start
                    "litellm_params": {"mock_response": "Hello from the mock upstream"}}],
        "tenants": [{"name": "acme", "api_key_sha256": [key_digest(KEY)]}],
        "tracing": tracing})
    app = build_app(config)
    return app, start_server(app, startup_timeout_s=300)


def _chat(server, model: str, **body) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                      timeout=60, json={"model": model, "messages": [{"role": "user", "content": "Count."}], **body})


def test_a_chat_requests_histograms_reach_the_collector_as_on_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "200")
    collected = Collected()
    receiver = http_receiver(collected)
    app, server = _serve(tmp_path, f"http://127.0.0.1:{receiver.server_address[1]}")
    try:
        registry = app.state.gateway.metrics
        assert registry.genai_otel is not None
        response = _chat(server, "mock", stream=True)
        assert response.status_code == 200
        labels = genai_labels("acme", "chat", "mock")
        deadline_s = time.monotonic() + 15
        while ((TIME_PER_OUTPUT_TOKEN, labels) not in registry.histograms
               or ("gen_ai.server.time_per_output_token", _attributes(labels)) not in _points(collected)):
            assert time.monotonic() < deadline_s, "not exported in time (every 200 ms)"
            time.sleep(0.05)
        scrape = httpx.get(f"{server.base_url}/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
        assert 'gen_ai_server_time_per_output_token_seconds_count{tenant="acme"' in scrape
    finally:
        server.stop()   # the final export: every series as it stands at the stop
        receiver.shutdown()
    assert _assert_as_registry(_points(collected), registry) == 3


def _hanging_collector() -> socket.socket:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


def test_a_hanging_collector_slows_no_request_and_the_stop_stays_bounded(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "100")
    monkeypatch.setattr(otel_setup, "FINAL_FLUSH_S", 1.0)   # the bound, shortened: what counts is that it holds
    hanging = _hanging_collector()
    app, server = _serve(tmp_path, f"http://127.0.0.1:{hanging.getsockname()[1]}")
    try:
        assert app.state.gateway.metrics.genai_otel is not None
        for _ in range(10):
            began_s = time.monotonic()
            assert _chat(server, "mock").status_code == 200
            assert time.monotonic() - began_s < 1.0   # an export waiting on the collector holds no request
            time.sleep(0.05)
        began_s = time.monotonic()
        server.stop()
        assert time.monotonic() - began_s < 3.0   # spans and metrics: one final flush, not 30 s timeouts
    finally:
        hanging.close()


def test_without_otlp_there_is_no_meter_provider(tmp_path):
    app, server = _serve(tmp_path, None)
    try:
        assert app.state.gateway.metrics.genai_otel is None
        assert _chat(server, "mock").status_code == 200
        assert any(name == REQUEST_DURATION for name, _ in app.state.gateway.metrics.histograms)
    finally:
        server.stop()
