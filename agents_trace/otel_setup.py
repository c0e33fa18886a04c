"""Building the OpenTelemetry SDK pipeline the tracer emits into.

The tracer gets its own `TracerProvider` (never the process-global one, so two apps in one
process never share spans). OTLP export is on when the config names an endpoint or the
standard variables do (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT`,
or `OTEL_TRACES_EXPORTER=otlp`), and off under `OTEL_TRACES_EXPORTER=none` or
`OTEL_SDK_DISABLED=true`. The protocol is the config's, else
`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL`, else http/protobuf
(`TraceConfig.resolved_otlp_protocol`: a variable naming another protocol is a
`TraceConfigError`, which `stepahead serve` reports as a bad config before it starts);
headers, certificates and compression come from the usual `OTEL_EXPORTER_OTLP_*` variables,
which the exporters read themselves. The resource's `service.name` is
`TraceConfig.resolved_service_name`: $OTEL_SERVICE_NAME, then `service.name` in
$OTEL_RESOURCE_ATTRIBUTES, then the config's.
Invariant: OTLP spans go through a `BatchSpanProcessor` whose queue holds at most
`otlp_max_queue_size` spans; when the collector is down, new spans are dropped, memory
does not grow, and no request ever waits for an export.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from agents_trace.config import TraceConfig
from agents_trace.ordered_ids import random_bits

HTTP_TRACES_PATH = "/v1/traces"


@dataclass(frozen=True, slots=True)
class OtlpTarget:
    """Where OTLP spans go. `endpoint` None lets the exporter read the environment."""

    protocol: str
    endpoint: str | None


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def otlp_target(config: TraceConfig, environ: Mapping[str, str] = os.environ) -> OtlpTarget | None:
    """The OTLP destination the config and environment ask for, or None for no OTLP.
    Raises TraceConfigError when OTLP is on and a variable names a protocol we cannot
    send (its value is not checked while nothing is exported)."""
    if _truthy(environ.get("OTEL_SDK_DISABLED")):
        return None
    exporters = {e.strip().lower() for e in environ.get("OTEL_TRACES_EXPORTER", "").split(",")
                 if e.strip()}
    if "none" in exporters:
        return None
    from_env = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") \
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not (config.otlp_endpoint or from_env or "otlp" in exporters):
        return None
    protocol = config.resolved_otlp_protocol(environ)
    endpoint = config.otlp_endpoint
    if endpoint and protocol != "grpc" and not endpoint.rstrip("/").endswith(HTTP_TRACES_PATH):
        endpoint = endpoint.rstrip("/") + HTTP_TRACES_PATH   # like OTEL_EXPORTER_OTLP_ENDPOINT
    return OtlpTarget(protocol, endpoint)


def otlp_exporter(target: OtlpTarget, timeout_s: float) -> SpanExporter:
    if target.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        return OTLPSpanExporter(endpoint=target.endpoint, timeout=timeout_s)   # http:// = plain
    if target.protocol not in ("http/protobuf", "http"):
        raise ValueError(f"unsupported OTLP protocol {target.protocol!r} "
                         "(use http/protobuf or grpc)")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter(endpoint=target.endpoint, timeout=timeout_s)


class SystemRandomIdGenerator(IdGenerator):
    """Trace and span ids from the operating system's generator (`random_bits`): the SDK's
    default draws them from `random`, whose state a tenant could rebuild from the ids of
    its own steps (the trace API shows them), then predict the next and count other
    tenants' steps between its own. Never the invalid id 0."""

    def generate_span_id(self) -> int:
        while not (span_id := random_bits(64)):
            pass
        return span_id

    def generate_trace_id(self) -> int:
        while not (trace_id := random_bits(128)):
            pass
        return trace_id

    def is_trace_id_random(self) -> bool:
        return True


def build_provider(config: TraceConfig, processors: tuple[SpanProcessor, ...] = (),
                   environ: Mapping[str, str] = os.environ) -> TracerProvider:
    """A provider with OTLP (when asked for) and any extra processors (tests)."""
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: config.resolved_service_name(environ)}),
                              id_generator=SystemRandomIdGenerator())
    target = otlp_target(config, environ)
    if target is not None:
        provider.add_span_processor(BatchSpanProcessor(
            otlp_exporter(target, config.otlp_export_timeout_s),
            max_queue_size=config.otlp_max_queue_size,
            max_export_batch_size=min(512, config.otlp_max_queue_size)))
    for processor in processors:
        provider.add_span_processor(processor)
    return provider
