"""The OpenTelemetry metrics pipeline beside the spans' (OTLP only).

With OTLP span export on (`otlp_target`), `build_meter_provider` builds an SDK
`MeterProvider` with the spans' resource (`otel_resource`: `service.name` and the
$OTEL_RESOURCE_ATTRIBUTES entries), one `PeriodicExportingMetricReader` that exports every
`resolved_metric_export_interval_s` (60 s by default) and the OTLP metric exporter of the
protocol and endpoint `otlp_metrics_target` resolves (headers, certificates, compression
and temporality preference: the exporter's own `OTEL_EXPORTER_OTLP_METRICS_*` /
`OTEL_EXPORTER_OTLP_*` variables). Without OTLP there is no meter provider at all.

Invariants: recording into its instruments is in memory (the SDK's aggregation, under
its own lock), never I/O: exports run on the reader's daemon thread. The provider is
shut down only through `meter_provider_stop`, a processor of the tracer provider, within
the spans' final flush deadline (`FinalFlushShutdown`), never by an exit hook of its own:
a collector that is down never stretches the stop past `FINAL_FLUSH_S` in all.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from agents_trace.config import TraceConfig
from agents_trace.otel_setup import (OtlpTarget, otel_resource, otlp_metrics_target, otlp_target,
                                     resolved_metric_export_interval_s, resolved_metrics_export_timeout_s)
from agents_trace.otlp_export_bounds import FinalFlushShutdown

log = logging.getLogger("stepahead.agents_trace")
MIN_SHUTDOWN_S = 0.001   # past the deadline: still tell the exporter to stop (ends its retries), wait no more


def otlp_metric_exporter(target: OtlpTarget, timeout_s: float) -> MetricExporter:
    if target.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        return OTLPMetricExporter(endpoint=target.endpoint, timeout=timeout_s)   # http:// = plain
    if target.protocol not in ("http/protobuf", "http"):
        raise ValueError(f"unsupported OTLP protocol {target.protocol!r} (use http/protobuf or grpc)")
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    return OTLPMetricExporter(endpoint=target.endpoint, timeout=timeout_s)


def build_meter_provider(config: TraceConfig, environ: Mapping[str, str] = os.environ,
                         resource: Resource | None = None) -> MeterProvider | None:
    """The metrics' provider when OTLP span export is on and the metrics have a target
    (`otlp_metrics_target`), else None. `resource`: the spans' (by default built the same
    way, `otel_resource`). Raises TraceConfigError as `otlp_target` does."""
    target = otlp_metrics_target(config, otlp_target(config, environ), environ)
    if target is None:
        return None
    reader = PeriodicExportingMetricReader(
        otlp_metric_exporter(target, resolved_metrics_export_timeout_s(config, environ)),
        export_interval_millis=resolved_metric_export_interval_s(environ) * 1000)
    return MeterProvider(metric_readers=[reader], resource=resource or otel_resource(config, environ),
                         shutdown_on_exit=False)   # stopped with the tracer, within its final flush


def meter_provider_stop(provider: MeterProvider) -> FinalFlushShutdown:
    """A processor for the tracer provider (`AgentTracer(span_processors=...)`) that shuts
    `provider` down at the tracer's stop with the seconds its final flush left: the last
    export is sent within them or dropped."""
    def shutdown(remaining_s: float) -> None:
        try:
            provider.shutdown(timeout_millis=max(remaining_s, MIN_SHUTDOWN_S) * 1000)
        except Exception as exc:   # the SDK raises when its reader missed the deadline: already logged
            log.debug("the metrics' final export did not finish: %s", exc)
    return FinalFlushShutdown(shutdown)
