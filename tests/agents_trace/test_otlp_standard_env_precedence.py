"""The standard OTEL_* variables the exporter setup reads: OTEL_TRACES_EXPORTER names the
exporters (otlp, console, none; another is a bad config), the exporter's numbers are the
file's, else the variable's, else the default, and a config endpoint's query is kept."""
from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export import ConsoleSpanExporter

from agents_trace.config import TraceConfig, TraceConfigError
from agents_trace.otel_setup import build_provider, otlp_target

ON = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}


def _exporters(provider) -> list:
    found = []
    for processor in provider._active_span_processor._span_processors:
        exporter = processor._batch_processor._exporter
        found.append(getattr(exporter, "exporter", exporter))   # inside the byte-budget wrapper
    return found


def test_console_exporter_prints_spans_and_sends_no_otlp(capsys):
    environ = {**ON, "OTEL_TRACES_EXPORTER": "console"}
    assert otlp_target(TraceConfig(), environ) is None
    provider = build_provider(TraceConfig(), environ=environ)
    assert [type(e) for e in _exporters(provider)] == [ConsoleSpanExporter]
    provider.get_tracer("t").start_span("chat printed-model").end()
    provider.shutdown()
    assert '"name": "chat printed-model"' in capsys.readouterr().out


def test_otlp_and_console_together():
    provider = build_provider(TraceConfig(), environ={**ON, "OTEL_TRACES_EXPORTER": "otlp, console"})
    try:
        assert [type(e).__name__ for e in _exporters(provider)] == ["OTLPSpanExporter", "ConsoleSpanExporter"]
    finally:
        provider.shutdown()


@pytest.mark.parametrize("value", ["zipkin", "otlp,jaeger"])
def test_an_exporter_we_do_not_have_is_a_config_error_naming_the_supported_ones(value):
    with pytest.raises(TraceConfigError) as refused:
        otlp_target(TraceConfig(), {**ON, "OTEL_TRACES_EXPORTER": value})
    assert str(refused.value).startswith("OTEL_TRACES_EXPORTER must be otlp, console or none")


def _otlp_numbers(config: TraceConfig, environ: dict) -> tuple[float, int, int]:
    provider = build_provider(config, environ={**ON, **environ})
    try:
        processor = provider._active_span_processor._span_processors[0]._batch_processor
        exporter = processor._exporter.exporter
        return exporter._client._timeout, processor._max_queue_size, processor._max_export_batch_size
    finally:
        provider.shutdown()


@pytest.mark.parametrize("config, environ, expected", [
    (TraceConfig(), {}, (10.0, 2048, 512)),
    (TraceConfig(), {"OTEL_EXPORTER_OTLP_TIMEOUT": "2", "OTEL_BSP_MAX_QUEUE_SIZE": "100",
                     "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "50"}, (2.0, 100, 50)),
    (TraceConfig(), {"OTEL_EXPORTER_OTLP_TIMEOUT": "2", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "3"},
     (3.0, 2048, 512)),
    (TraceConfig(otlp_export_timeout_s=7.0, otlp_max_queue_size=40),
     {"OTEL_EXPORTER_OTLP_TIMEOUT": "2", "OTEL_BSP_MAX_QUEUE_SIZE": "100"}, (7.0, 40, 40)),
])
def test_a_standard_variable_wins_over_the_default_and_the_file_over_both(config, environ, expected):
    assert _otlp_numbers(config, environ) == expected


@pytest.mark.parametrize("name, value", [("OTEL_BSP_MAX_QUEUE_SIZE", "lots"),
                                         ("OTEL_EXPORTER_OTLP_TIMEOUT", "-1")])
def test_a_bad_number_in_a_standard_variable_is_a_config_error_naming_it(name, value):
    with pytest.raises(TraceConfigError) as refused:
        otlp_target(TraceConfig(), {**ON, name: value})
    assert str(refused.value).startswith(f"{name} must be a positive")


@pytest.mark.parametrize("configured, expected", [
    ("http://h:4318/otlp/v1/traces?tenant=a", "http://h:4318/otlp/v1/traces?tenant=a"),
    ("http://h:4318/otlp?tenant=a", "http://h:4318/otlp/v1/traces?tenant=a"),
    ("http://h:4318/", "http://h:4318/v1/traces"),
    ("http://h:4318", "http://h:4318/v1/traces"),
])
def test_a_config_endpoints_query_is_kept_after_the_traces_path(configured, expected):
    assert otlp_target(TraceConfig(otlp_endpoint=configured), {}).endpoint == expected


def test_the_attribute_limit_is_a_tracing_key_checked_like_the_others():
    from agents_trace.config import parse_trace_config

    assert parse_trace_config({"otlp_attribute_max_length": 4096}).resolved_otlp_attribute_max_length({}) == 4096
    for bad in (0, "big", 1.5):
        with pytest.raises(TraceConfigError):
            parse_trace_config({"otlp_attribute_max_length": bad})


def test_a_bad_number_is_refused_with_the_console_exporter_alone_too():
    with pytest.raises(TraceConfigError):
        otlp_target(TraceConfig(), {"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_MAX_QUEUE_SIZE": "0"})
