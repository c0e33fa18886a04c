"""The [tracing] table and where the store lives."""
from __future__ import annotations

from pathlib import Path

import pytest

from agents_trace.config import TraceConfig, TraceConfigError, parse_trace_config


def test_parse_trace_config_reads_known_keys():
    config = parse_trace_config({"capture_content": True, "otlp_endpoint": "http://c:4318",
                                 "otlp_protocol": "grpc", "retention_max_age_s": 60,
                                 "store_path": "/tmp/x.db", "session_idle_timeout_s": 5})
    assert config.capture_content and config.otlp_protocol == "grpc"
    assert config.retention_max_age_s == 60.0 and config.resolved_store_path() == Path("/tmp/x.db")


@pytest.mark.parametrize("table", [{"nope": 1}, {"capture_content": "yes"},
                                   {"queue_size": 0}, {"otlp_protocol": "udp"},
                                   {"retention_max_bytes": 1.5}])
def test_parse_trace_config_rejects_bad_values(table):
    with pytest.raises(TraceConfigError):
        parse_trace_config(table)


def test_trace_config_store_path_from_env_then_user_data_dir():
    assert TraceConfig().resolved_store_path({"STEPAHEAD_TRACE_DB": "/d/t.db"}) == Path("/d/t.db")
    default = TraceConfig().resolved_store_path({})
    assert default.name == "traces.sqlite3" and "stepahead" in str(default)


@pytest.mark.parametrize("value,captured", [("true", True), ("True", True), ("SPAN_ONLY", True),
                                            ("span_and_event", True), ("EVENT_ONLY", True), ("false", False),
                                            ("NO_CONTENT", False), ("", False), ("1", False)])
def test_unset_capture_content_follows_the_opentelemetry_genai_switch(value, captured):
    environ = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": value}
    assert TraceConfig().resolved_capture_content(environ) is captured
    assert TraceConfig().resolved_capture_content({}) is False   # unset everywhere: off
    # the file's setting, either way, wins over the variable
    assert parse_trace_config({"capture_content": False}).resolved_capture_content(environ) is False
    assert parse_trace_config({"capture_content": True}).resolved_capture_content({}) is True


def test_the_tracer_keeps_content_as_the_switch_says(tmp_path):
    from agents_trace.tracer import AgentTracer

    switch = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true", "OTEL_TRACES_EXPORTER": "none"}
    assert AgentTracer(TraceConfig(store_enabled=False), environ=switch).captures_content
    assert not AgentTracer(TraceConfig(store_enabled=False), environ={"OTEL_TRACES_EXPORTER": "none"}).captures_content
    assert not AgentTracer(TraceConfig(store_enabled=False, capture_content=False), environ=switch).captures_content
