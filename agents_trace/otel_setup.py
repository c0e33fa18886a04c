"""Building the OpenTelemetry SDK pipeline the tracer emits into.

The tracer gets its own `TracerProvider` (never the process-global one, so two apps in one
process never share spans). Which exporters run: $OTEL_TRACES_EXPORTER when set, a
comma-separated list of `otlp`, `console` (the SDK's ConsoleSpanExporter, spans as JSON on
stdout) and `none` (nothing; it wins), another name being a `TraceConfigError` (what
`stepahead serve` reports as a bad config before it starts); unset, OTLP when the config
names an endpoint or the standard variables do (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
`OTEL_EXPORTER_OTLP_ENDPOINT`). `OTEL_SDK_DISABLED=true` turns everything off. The
protocol is the config's, else `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` /
`OTEL_EXPORTER_OTLP_PROTOCOL`, else http/protobuf (`TraceConfig.resolved_otlp_protocol`:
a variable naming another protocol is a `TraceConfigError`); the export timeout, queue
and batch sizes and the attribute length limit are the file's, else the standard
variable's, else the default (`TraceConfig.resolved_otlp_*`); headers, certificates and
compression come from the usual `OTEL_EXPORTER_OTLP_*` variables, which the exporters
read themselves. The resource's `service.name` is `TraceConfig.resolved_service_name`:
$OTEL_SERVICE_NAME, then `service.name` in $OTEL_RESOURCE_ATTRIBUTES, then the config's.
Invariant: exported spans go through a `BatchSpanProcessor` whose queue holds at most
`otlp_max_queue_size` spans, each attribute value of them at most
`otlp_attribute_max_length` characters (a chat span's captured conversation included), so
when the collector is down new spans are dropped, memory stays bounded, and no request
ever waits for an export; each export request stays under a byte budget
(`otlp_export_bounds`), and the final flush at stop takes at most `FINAL_FLUSH_S`, all
exporters together (one `FinalFlushDeadline`).

With OTLP span export on, the GenAI server metrics go over OTLP too (agents_trace/otel_metrics.py
builds their pipeline): `otlp_metrics_target` resolves where, mirroring the spans' rules with
the metrics' own variables (`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, `…_PROTOCOL`, `…_TIMEOUT`,
`OTEL_METRIC_EXPORT_INTERVAL`), and `otlp_target` checks those variables too, so a bad one is
a bad config before the start; a `FinalFlushShutdown` among the processors gets the same
final flush deadline as the exporters.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from urllib.parse import urlsplit, urlunsplit

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from agents_trace.config import (DEFAULT_OTLP_EXPORT_TIMEOUT_S, MAX_OTLP_EXPORT_TIMEOUT_S, OTLP_PROTOCOLS,
                                 TraceConfig, TraceConfigError, env_number)
from agents_trace.ordered_ids import random_bits
from agents_trace.otlp_export_bounds import (FINAL_FLUSH_S, MAX_REQUEST_BYTES, ByteBudgetSpanExporter,
                                             FinalFlushBoundedProcessor, FinalFlushDeadline,
                                             FinalFlushShutdown, estimated_value_bytes)
from agents_trace.otlp_failure_log import quiet_sdk_export_logging

HTTP_TRACES_PATH = "/v1/traces"
HTTP_METRICS_PATH = "/v1/metrics"
METRICS_EXPORTER_ENV = "OTEL_METRICS_EXPORTER"
METRICS_PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
METRICS_TIMEOUT_ENVS = ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")   # seconds
METRIC_EXPORT_INTERVAL_ENV = "OTEL_METRIC_EXPORT_INTERVAL"   # milliseconds, as the SDK reads it
DEFAULT_METRIC_EXPORT_INTERVAL_S = 60.0
MAX_METRIC_EXPORT_INTERVAL_S = 86_400.0
TRACES_EXPORTER_ENV = "OTEL_TRACES_EXPORTER"
SUPPORTED_TRACES_EXPORTERS = ("otlp", "console", "none")


@dataclass(frozen=True, slots=True)
class OtlpTarget:
    """Where OTLP spans go. `endpoint` None lets the exporter read the environment."""

    protocol: str
    endpoint: str | None


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def named_traces_exporters(environ: Mapping[str, str]) -> frozenset[str] | None:
    """The exporters $OTEL_TRACES_EXPORTER names (lower-cased), None when it is unset or
    empty. A name we cannot export with (`zipkin`, `jaeger`, a typo) raises
    TraceConfigError naming the supported ones, rather than being ignored."""
    named = frozenset(e.strip().lower() for e in environ.get(TRACES_EXPORTER_ENV, "").split(",")
                      if e.strip())
    unsupported = sorted(named - set(SUPPORTED_TRACES_EXPORTERS))
    if unsupported:
        raise TraceConfigError(f"{TRACES_EXPORTER_ENV} must be otlp, console or none (or a "
                               f"comma-separated list of them), not {', '.join(map(repr, unsupported))}")
    return named or None


def _exporters_asked_for(environ: Mapping[str, str]) -> frozenset[str] | None:
    """`named_traces_exporters`, or the empty set when the SDK is disabled or `none` is named."""
    if _truthy(environ.get("OTEL_SDK_DISABLED")):
        return frozenset()
    named = named_traces_exporters(environ)
    return frozenset() if named is not None and "none" in named else named


def with_signal_path(endpoint: str, signal_path: str) -> str:
    """An OTLP/HTTP base URL with `signal_path` (`/v1/traces`, `/v1/metrics`) appended to its
    path (as to OTEL_EXPORTER_OTLP_ENDPOINT), its query and fragment kept; one already ending
    in it as is."""
    parts = urlsplit(endpoint)
    path = parts.path.rstrip("/")
    if path.endswith(signal_path):
        return endpoint
    return urlunsplit(parts._replace(path=path + signal_path))


def with_traces_path(endpoint: str) -> str:
    return with_signal_path(endpoint, HTTP_TRACES_PATH)


def otlp_target(config: TraceConfig, environ: Mapping[str, str] = os.environ) -> OtlpTarget | None:
    """The OTLP destination the config and environment ask for, or None for no OTLP.
    Raises TraceConfigError when $OTEL_TRACES_EXPORTER names an exporter we do not have,
    or when OTLP is on and a variable names a protocol we cannot send or a bad number (their
    values are not checked while nothing is exported)."""
    exporters = _exporters_asked_for(environ)
    if exporters is not None and "otlp" not in exporters:
        if exporters:                 # console alone: its queue and attribute numbers too
            _check_exporter_numbers(config, environ)
        return None
    from_env = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") \
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if exporters is None and not (config.otlp_endpoint or from_env):
        return None
    protocol = config.resolved_otlp_protocol(environ)
    endpoint = config.otlp_endpoint
    if endpoint and protocol != "grpc":
        endpoint = with_traces_path(endpoint)
    _check_exporter_numbers(config, environ)
    target = OtlpTarget(protocol, endpoint)
    otlp_metrics_target(config, target, environ)   # its variables are checked now too
    return target


def otlp_metrics_target(config: TraceConfig, traces: OtlpTarget | None,
                        environ: Mapping[str, str] = os.environ) -> OtlpTarget | None:
    """Where the GenAI metrics go while spans go to `traces` (None: no OTLP, no metrics).
    None too when $OTEL_METRICS_EXPORTER is set without naming `otlp` (`none`), or when
    only $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT named the spans' collector (the metrics have
    none then). The protocol is the config's, else $OTEL_EXPORTER_OTLP_METRICS_PROTOCOL,
    else the spans' (`traces.protocol`); the config's endpoint gets
    `/v1/metrics` (http), else the exporter reads $OTEL_EXPORTER_OTLP_METRICS_ENDPOINT or
    $OTEL_EXPORTER_OTLP_ENDPOINT itself. Raises TraceConfigError for a bad protocol,
    timeout or export interval variable."""
    if traces is None:
        return None
    named = {e.strip().lower() for e in environ.get(METRICS_EXPORTER_ENV, "").split(",") if e.strip()}
    if named and "otlp" not in named:
        return None
    protocol = config.otlp_protocol or _metrics_protocol(environ) or traces.protocol
    resolved_metrics_export_timeout_s(config, environ)
    resolved_metric_export_interval_s(environ)
    if config.otlp_endpoint:
        endpoint = config.otlp_endpoint if protocol == "grpc" else with_signal_path(config.otlp_endpoint,
                                                                                    HTTP_METRICS_PATH)
        return OtlpTarget(protocol, endpoint)
    if environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") and not (
            environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")):
        return None
    return OtlpTarget(protocol, None)


def _metrics_protocol(environ: Mapping[str, str]) -> str | None:
    value = environ.get(METRICS_PROTOCOL_ENV, "").strip()
    if value and value not in OTLP_PROTOCOLS:
        raise TraceConfigError(f"{METRICS_PROTOCOL_ENV} must be one of {OTLP_PROTOCOLS}, not {value!r}")
    return value or None


def resolved_metrics_export_timeout_s(config: TraceConfig, environ: Mapping[str, str] = os.environ) -> float:
    """Each metrics export request's timeout: `otlp_export_timeout_s`, else
    $OTEL_EXPORTER_OTLP_METRICS_TIMEOUT, else $OTEL_EXPORTER_OTLP_TIMEOUT (seconds), else 10."""
    if config.otlp_export_timeout_s is not None:
        return config.otlp_export_timeout_s
    return env_number(environ, METRICS_TIMEOUT_ENVS, float, DEFAULT_OTLP_EXPORT_TIMEOUT_S,
                      most=MAX_OTLP_EXPORT_TIMEOUT_S)


def resolved_metric_export_interval_s(environ: Mapping[str, str] = os.environ) -> float:
    """Seconds between metrics exports: $OTEL_METRIC_EXPORT_INTERVAL (milliseconds), else 60."""
    return env_number(environ, (METRIC_EXPORT_INTERVAL_ENV,), float, DEFAULT_METRIC_EXPORT_INTERVAL_S * 1000,
                      most=MAX_METRIC_EXPORT_INTERVAL_S * 1000) / 1000


def _check_exporter_numbers(config: TraceConfig, environ: Mapping[str, str]) -> None:
    """Resolve the exporter's numbers now, so a bad variable is a bad config at the start."""
    config.resolved_otlp_export_timeout_s(environ)
    config.resolved_otlp_max_export_batch_size(environ)   # and the queue size
    config.resolved_otlp_attribute_max_length(environ)


def console_export_on(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether $OTEL_TRACES_EXPORTER asks for the console exporter (and nothing turns it off)."""
    exporters = _exporters_asked_for(environ)
    return exporters is not None and "console" in exporters


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
    """A provider with the exporters asked for (OTLP first, then console) and any extra
    processors (tests). With an exporter, span attribute values are cut at
    `resolved_otlp_attribute_max_length` characters (the trace store keeps full content:
    it is written from the steps, not from the spans)."""
    target = otlp_target(config, environ)
    exporters: list[SpanExporter] = []
    if target is not None:
        exporters.append(otlp_exporter(target, config.resolved_otlp_export_timeout_s(environ)))
    if console_export_on(environ):
        exporters.append(ConsoleSpanExporter(out=sys.stdout))   # today's stdout, not the import's
    limits = None
    if exporters:
        limits = SpanLimits(max_span_attribute_length=config.resolved_otlp_attribute_max_length(environ))
    provider = TracerProvider(resource=otel_resource(config, environ),
                              id_generator=SystemRandomIdGenerator(), span_limits=limits)
    if exporters:
        quiet_sdk_export_logging()
    resource_bytes = sum(len(key) + estimated_value_bytes(value)
                         for key, value in provider.resource.attributes.items())
    final_flush = FinalFlushDeadline(FINAL_FLUSH_S)   # shared: the stop's final flush is FINAL_FLUSH_S in all
    for exporter in exporters:
        provider.add_span_processor(FinalFlushBoundedProcessor(
            ByteBudgetSpanExporter(exporter, MAX_REQUEST_BYTES, resource_bytes),
            deadline=final_flush, max_queue_size=config.resolved_otlp_max_queue_size(environ),
            max_export_batch_size=config.resolved_otlp_max_export_batch_size(environ)))
    for processor in processors:
        if isinstance(processor, FinalFlushShutdown):
            processor.deadline = final_flush   # after the exporters': what their final flush left
        provider.add_span_processor(processor)
    return provider


def otel_resource(config: TraceConfig, environ: Mapping[str, str] = os.environ) -> Resource:
    """The resource spans and metrics name: `service.name` (`resolved_service_name`) and the
    other $OTEL_RESOURCE_ATTRIBUTES entries."""
    return Resource.create({SERVICE_NAME: config.resolved_service_name(environ)})
