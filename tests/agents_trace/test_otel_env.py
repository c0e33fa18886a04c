"""The standard OTEL_* variables the tracer reads: an OTLP protocol it cannot send is a
bad config naming the variable (never a traceback at app start), and `service.name`
follows the OpenTelemetry SDK's order, stepahead's default last."""
from __future__ import annotations

import pytest

from agents_trace.config import TraceConfig, TraceConfigError
from agents_trace.otel_setup import build_provider, otlp_target

ON = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}


@pytest.mark.parametrize("name", ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"])
@pytest.mark.parametrize("value", ["http/json", "grcp", "http"])
def test_an_unsupported_protocol_variable_is_a_config_error_naming_it(name, value):
    with pytest.raises(TraceConfigError) as refused:
        otlp_target(TraceConfig(), {**ON, name: value})
    assert str(refused.value) == f"{name} must be one of ('http/protobuf', 'grpc'), not {value!r}"


def test_the_protocol_that_applies_is_the_one_checked():
    assert otlp_target(TraceConfig(), {**ON, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
                                       "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}).protocol == "grpc"
    assert otlp_target(TraceConfig(otlp_protocol="http/protobuf"),
                       {**ON, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}).protocol == "http/protobuf"
    assert otlp_target(TraceConfig(), {**ON, "OTEL_EXPORTER_OTLP_PROTOCOL": " grpc "}).protocol == "grpc"
    assert otlp_target(TraceConfig(), {**ON, "OTEL_EXPORTER_OTLP_PROTOCOL": ""}).protocol == "http/protobuf"
    # nothing exported: a variable meant for another program is not ours to refuse
    assert otlp_target(TraceConfig(), {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}) is None


def test_building_the_provider_refuses_it_too():
    with pytest.raises(TraceConfigError):
        build_provider(TraceConfig(), environ={**ON, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


@pytest.mark.parametrize("environ, config, expected", [
    ({}, TraceConfig(), "stepahead"),
    ({}, TraceConfig(service_name="from-file"), "from-file"),
    ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=payments-gw"}, TraceConfig(), "payments-gw"),
    ({"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod, service.name = pay%20gw"},
     TraceConfig(service_name="from-file"), "pay gw"),
    ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=a,service.name=b"}, TraceConfig(), "b"),
    ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=,team=x,junk"}, TraceConfig(), "stepahead"),
    ({"OTEL_SERVICE_NAME": "named", "OTEL_RESOURCE_ATTRIBUTES": "service.name=payments-gw"},
     TraceConfig(service_name="from-file"), "named"),
    ({"OTEL_SERVICE_NAME": ""}, TraceConfig(), "stepahead"),
])
def test_service_name_order_is_the_sdks_then_the_config(environ, config, expected):
    assert config.resolved_service_name(environ) == expected


def test_the_exported_resource_takes_service_name_from_resource_attributes(monkeypatch):
    """The QA repro: OTEL_RESOURCE_ATTRIBUTES alone exported service.name "stepahead"."""
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=payments-gw,team=pay")
    attributes = build_provider(TraceConfig()).resource.attributes
    assert (attributes["service.name"], attributes["team"]) == ("payments-gw", "pay")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "named")
    assert build_provider(TraceConfig()).resource.attributes["service.name"] == "named"
    monkeypatch.delenv("OTEL_SERVICE_NAME")
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES")
    assert build_provider(TraceConfig()).resource.attributes["service.name"] == "stepahead"


def test_resource_attribute_reads_the_variables_format():
    from agents_trace.config import resource_attribute

    assert resource_attribute("a=1,b=x%2Cy", "b") == "x,y"
    assert resource_attribute("a=1", "b") is None
    assert resource_attribute("", "b") is None
    assert resource_attribute("b=k=v", "b") == "k=v"


def test_span_and_trace_ids_do_not_come_from_random():
    """The ids of a tenant's own steps (the trace API shows them) must not let it rebuild
    `random`'s state: seeding it does not repeat the ids the provider makes."""
    import random

    from agents_trace.config import TraceConfig
    from agents_trace.otel_setup import build_provider

    ids = build_provider(TraceConfig(), environ={}).id_generator
    random.seed(11)
    first = (ids.generate_trace_id(), ids.generate_span_id())
    random.seed(11)
    assert (ids.generate_trace_id(), ids.generate_span_id()) != first
    assert 0 < first[0] < 2 ** 128 and 0 < first[1] < 2 ** 64
