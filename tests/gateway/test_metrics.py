import pytest

from gateway.engine_series import router_gauges, worker_gauges
from gateway.metrics import Registry
from gateway.metrics_genai import record_server_request


def test_registry_renders_vllm_names_per_tenant_and_worker():
    registry = Registry()
    registry.record_finish(tenant="a", model="m", worker="w0", finish_reason="stop",
                           num_prompt_tokens=100, num_cached_tokens=64, num_output_tokens=5,
                           ttft_s=0.03)
    registry.record_finish(tenant="a", model="m", worker="w0", finish_reason="stop",
                           num_prompt_tokens=10, num_cached_tokens=0, num_output_tokens=1,
                           ttft_s=3.0)
    text = registry.render()
    labels = 'tenant="a",model_name="m",worker="w0"'
    assert f"vllm:prefix_cache_queries_total{{{labels}}} 110" in text
    assert f"vllm:prefix_cache_hits_total{{{labels}}} 64" in text
    assert f"vllm:prompt_tokens_total{{{labels}}} 110" in text
    tiered = labels + ',service_tier="default"'
    assert f'vllm:time_to_first_token_seconds_bucket{{{tiered},le="0.04"}} 1' in text
    assert f'vllm:time_to_first_token_seconds_bucket{{{tiered},le="+Inf"}} 2' in text
    assert f"vllm:time_to_first_token_seconds_count{{{tiered}}} 2" in text
    registry.record_finish(tenant="a", model="m", worker="w0", finish_reason="stop", num_prompt_tokens=10,
                           num_cached_tokens=0, num_output_tokens=1, ttft_s=9.0, service_tier="flex")
    text = registry.render()
    assert f"vllm:time_to_first_token_seconds_count{{{tiered}}} 2" in text   # a batch request's wait kept apart
    assert f'vllm:time_to_first_token_seconds_count{{{labels},service_tier="flex"}} 1' in text
    assert f"vllm:prompt_tokens_total{{{labels}}} 120" in text
    assert "# TYPE vllm:prefix_cache_hits_total counter" in text


def test_registry_escapes_label_values():
    registry = Registry()
    registry.record_request('t"x', "m\\", "chat", 200)
    assert 'tenant="t\\"x",model_name="m\\\\"' in registry.render()


def test_worker_gauges_flatten_engine_rows_into_info_levels_and_counts():
    rows = [{"worker": "w0", "num_running": 2, "ok": True, "num_decoded_tokens": 9,
             "tiers": {"hot": {"num_used_blocks": 29, "num_evictions": 4}},
             "tenants": {"a": {"num_hot_hit_tokens": 448, "num_pinned_blocks": 3}}}]
    gauges = worker_gauges("m", rows)
    base = (("model_name", "m"), ("worker", "w0"))
    tenant = base + (("tenant", "a"),)
    assert gauges == {
        ("stepahead_worker_info", base): 1.0,
        ("stepahead_worker_level", base + (("field", "num_running"),)): 2.0,
        ("stepahead_worker_level", base + (("field", "hot_num_used_blocks"),)): 29.0,
        ("stepahead_worker_counts_total", base + (("field", "num_decoded_tokens"),)): 9.0,
        ("stepahead_worker_counts_total", base + (("field", "hot_num_evictions"),)): 4.0,
        ("stepahead_worker_tenant_info", tenant): 1.0,
        ("stepahead_worker_tenant_counts_total", tenant + (("field", "num_hot_hit_tokens"),)): 448.0,
        ("stepahead_worker_tenant_level", tenant + (("field", "num_pinned_blocks"),)): 3.0}


def test_router_gauges_count_each_field_by_its_key_beside_an_info_of_1():
    stats = {"num_routed": {"reserved": 7, "prefix": 2}, "num_session_moves": 1, "num_rejected": {},
             "num_transfers": 0, "num_transferred_blocks": 5, "label": "not a number"}
    counts = (("model_name", "m"),)
    assert router_gauges("m", stats) == {
        ("stepahead_router_info", counts): 1.0,
        ("stepahead_router_counts_total", counts + (("field", "num_routed_reserved"),)): 7.0,
        ("stepahead_router_counts_total", counts + (("field", "num_routed_prefix"),)): 2.0,
        ("stepahead_router_counts_total", counts + (("field", "num_session_moves"),)): 1.0,
        ("stepahead_router_counts_total", counts + (("field", "num_transfers"),)): 0.0,
        ("stepahead_router_counts_total", counts + (("field", "num_transferred_blocks"),)): 5.0}
    assert router_gauges("m", {}) == {}   # no router (an upstream model): no info either


def test_a_models_other_counts_go_under_the_family_they_name():
    stats = {"num_encoded": 3, "num_spliced": 2, "off": 0}
    labels = (("model_name", "m"),)
    assert router_gauges("m", stats, "stepahead_prompt_token_cache_info") == {
        ("stepahead_prompt_token_cache_info", labels): 1.0,
        ("stepahead_prompt_token_cache_counts_total", labels + (("field", "num_encoded"),)): 3.0,
        ("stepahead_prompt_token_cache_counts_total", labels + (("field", "num_spliced"),)): 2.0,
        ("stepahead_prompt_token_cache_level", labels + (("field", "off"),)): 0.0}


def test_every_info_series_is_1_and_numbers_render_typed_as_gauges_or_counters():
    """QA64: the `_info` families held numbers and counters, typed as gauges."""
    from prometheus_client.parser import text_string_to_metric_families

    rows = [{"worker": "w0", "ready": 1, "in_flight": 3, "num_decode_passes": 12, "num_restarts": 1,
             "num_referenced_blocks": 6, "num_pins_set": 2, "num_prefetches": 5,
             "tiers": {"hot": {"num_blocks": 64, "num_free_blocks": 35, "num_background_evictions": 1,
                               "bytes_per_block": 4096}},
             "tenants": {"a": {"num_requests": 4, "num_reserved_blocks": 8, "forecasts_followed": 1}}}]
    gauges = {**worker_gauges("m", rows), **router_gauges("m", {"num_retried": 2}),
              **router_gauges("m", {"num_checked": 1, "off": 1}, "stepahead_prompt_token_cache_info")}
    families = {f.name: f for f in text_string_to_metric_families(Registry().render(gauges))}
    for name, family in families.items():
        if name.endswith("_info"):
            assert family.type == "gauge" and [s.value for s in family.samples] == [1.0], name
            assert all("field" not in s.labels for s in family.samples), name

    def fields(name: str) -> set[str]:
        return {s.labels["field"] for s in families[name].samples}

    assert families["stepahead_worker_counts"].type == "counter"   # the parser drops `_total`
    assert fields("stepahead_worker_counts") == {"num_decode_passes", "num_restarts", "num_pins_set",
                                                 "num_prefetches", "hot_num_background_evictions"}
    assert families["stepahead_worker_level"].type == "gauge"
    assert fields("stepahead_worker_level") == {"ready", "in_flight", "num_referenced_blocks", "hot_num_blocks",
                                                "hot_num_free_blocks", "hot_bytes_per_block"}
    assert fields("stepahead_worker_tenant_counts") == {"num_requests"}
    assert fields("stepahead_worker_tenant_level") == {"num_reserved_blocks", "forecasts_followed"}
    assert families["stepahead_router_counts"].type == "counter" and fields("stepahead_router_counts") == {"num_retried"}
    assert fields("stepahead_prompt_token_cache_counts") == {"num_checked"}
    assert fields("stepahead_prompt_token_cache_level") == {"off"}


def test_render_for_a_tenant_keeps_only_its_series():
    registry = Registry()
    for tenant in ("a", "ab"):
        registry.record_finish(tenant=tenant, model="m", worker="w0", finish_reason="stop",
                               num_prompt_tokens=10, num_cached_tokens=0, num_output_tokens=1,
                               ttft_s=0.5)
        registry.record_request(tenant, "m", "chat", 200)
        record_server_request(registry, tenant=tenant, endpoint="chat", model="m", duration_s=0.9, ttft_s=0.5,
                              num_output_tokens=3)
        record_server_request(registry, tenant=tenant, endpoint="chat", model="m", duration_s=0.1,
                              error_type="rate_limit_exceeded")
    registry.record_request("unauthenticated", "", "chat", 401)
    gauges = {("stepahead_worker_level", (("model_name", "m"), ("worker", "w0"), ("field", "x"))): 1.0,
              ("stepahead_tenant_active_requests", (("tenant", "ab"),)): 2.0}
    mine = registry.render(gauges, tenant="a")
    series = [line for line in mine.splitlines() if not line.startswith("#")]
    assert series and all('tenant="a"' in line for line in series)
    assert 'vllm:time_to_first_token_seconds_count{tenant="a",model_name="m",worker="w0",service_tier="default"} 1' \
        in mine
    for name in ("request_duration", "time_to_first_token", "time_per_output_token"):   # the GenAI series too
        assert f'gen_ai_server_{name}_seconds_count{{tenant="a",gen_ai_operation_name="chat",' in mine
    assert 'error_type="rate_limit_exceeded"} 1' in mine and 'tenant="ab"' not in mine
    everything = registry.render(gauges)
    assert all(f'tenant="{t}"' in everything for t in ("a", "ab", "unauthenticated"))
    assert "stepahead_worker_level" in everything and "stepahead_worker_level" not in mine


def test_prefix_reuse_counts_what_the_previous_prompt_left_and_what_was_evicted():
    registry = Registry()
    registry.record_prefix_reuse("a", "m", num_from_previous=256, num_cached=320)   # kept, plus shared tokens
    registry.record_prefix_reuse("a", "m", num_from_previous=512, num_cached=128)   # 384 evicted
    registry.record_prefix_reuse("b", "m", num_from_previous=64, num_cached=0)
    text = registry.render(tenant="a")
    assert 'stepahead_prefix_from_previous_tokens_total{tenant="a",model_name="m"} 768' in text
    assert 'stepahead_evicted_prefix_tokens_total{tenant="a",model_name="m"} 384' in text
    assert 'tenant="b"' not in text and "# TYPE stepahead_evicted_prefix_tokens_total counter" in text


def test_a_tenants_view_is_every_series_labelled_with_it_and_no_other():
    """Read from the registry's index by tenant: the same lines, in the same order, as
    filtering the admin's view by the tenant's label."""
    registry = Registry()
    for i in range(300):
        tenant = f"t{i % 30}"
        registry.record_request(tenant, "m", "chat", 200 if i % 7 else 429)
        registry.record_finish(tenant=tenant, model="m", worker=f"w{i % 2}", finish_reason="stop",
                               num_prompt_tokens=10, num_cached_tokens=i % 10, num_output_tokens=1, ttft_s=0.01 * i)
        registry.record_overhead(tenant, 0.001)
        record_server_request(registry, tenant=tenant, endpoint="chat" if i % 3 else "completions", model="m",
                              duration_s=0.02 * i, error_type=None if i % 7 else "rate_limit_exceeded",
                              ttft_s=0.01 * i, num_output_tokens=i % 4)
    for tenant in ("t3", "t29", "nobody"):
        lines = [line for line in registry.render({}, tenant=tenant).splitlines() if line and not line.startswith("#")]
        everything = [line for line in registry.render({}).splitlines() if not line.startswith("#")]
        assert lines == [line for line in everything if f'tenant="{tenant}"' in line]
    assert registry.render({}, tenant="nobody") == "\n"


def test_a_finish_reason_or_worker_of_another_type_is_a_string_label_and_the_page_still_renders():
    """An upstream may report `finish_reason: 5` or null: one such reply must not break /metrics."""
    registry = Registry()
    for reason in ("stop", 5, None, "length"):
        registry.record_finish(tenant="a", model="m", worker="w0", finish_reason=reason, num_prompt_tokens=1,
                               num_cached_tokens=0, num_output_tokens=1, ttft_s=None)
    registry.record_finish(tenant="a", model="m", worker=None, finish_reason="stop", num_prompt_tokens=1,
                           num_cached_tokens=0, num_output_tokens=1, ttft_s=None)
    text = registry.render()
    assert 'finished_reason="5"' in text and 'finished_reason="None"' in text
    assert registry.render(tenant="a") == text


@pytest.mark.parametrize(("path", "endpoint", "body"), [
    ("/v1/chat/completions", "chat", {"messages": [{"role": "user", "content": "hi"}], "temperature": 9}),
    ("/v1/completions", "completions", {"prompt": "hi", "temperature": 9}),
    ("/v1/embeddings", "embeddings", {"input": "hi", "dimensions": 0}),
])
def test_a_request_its_checks_refuse_counts_under_the_configured_model_it_names(gateway, path, endpoint, body):
    """A 400 from validation counts under the model the body names when that is configured
    (as a later 400, a context too long, does), and under "" when it is not: a client's
    string is never a label."""
    from tests.gateway.test_http_errors import assert_error, post

    counters = gateway.state.metrics.counters

    def count(model: str) -> float:
        labels = (("tenant", "beta"), ("model_name", model), ("endpoint", endpoint), ("status", "400"))
        return counters.get(("stepahead_requests_total", labels), 0.0)

    named, unnamed, unknown = count("tiny"), count(""), count("no-such-model")
    assert_error(post(gateway, dict(body, model="tiny"), path=path, tenant="beta"), 400)
    assert (count("tiny"), count("")) == (named + 1, unnamed)
    assert_error(post(gateway, dict(body, model="no-such-model"), path=path, tenant="beta"), 400)
    assert_error(post(gateway, dict(body, model=["tiny"]), path=path, tenant="beta"), 400)
    assert (count("tiny"), count(""), count("no-such-model")) == (named + 1, unnamed + 2, unknown)
