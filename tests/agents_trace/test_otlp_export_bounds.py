"""What bounds OTLP export: captured content cut per attribute (a collector outage holds
at most queue x span size), each export request under a byte budget (one tenant's large
prompts never get another's spans refused with them), a bounded final flush, and the
SDK's failure logging kept to a line a minute."""
from __future__ import annotations

import logging
import socket
import threading
import time
from concurrent import futures

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agents_trace import otel_setup
from agents_trace.config import TraceConfig
from agents_trace.records import StepResult
from agents_trace.step_queries import step_content
from agents_trace.tracer import AgentTracer

from tests.agents_trace.helpers import ManualClock

INPUT = "gen_ai.input.messages"
DEAD_COLLECTOR = "http://127.0.0.1:9"   # the discard port: nothing listens
QUICK = {"otlp_export_timeout_s": 0.2}  # a stop that gives up on it at once


def _one_step_session(tracer: AgentTracer, clock: ManualClock, tenant: str, session: str,
                      text: str) -> None:
    ctx = tracer.begin(tenant, {"x-session-id": session},
                       {"model": "tiny", "messages": [{"role": "user", "content": text}]})
    clock.advance(0.5)
    tracer.end(ctx, StepResult(num_input_tokens=10, num_output_tokens=2, finish_reason="stop",
                               output_text="ok"))


def test_exported_content_is_cut_at_the_attribute_limit_and_the_store_keeps_it_whole(tmp_path):
    """The QA repro (M1): each queued chat span held the whole 1 MB prompt."""
    clock = ManualClock(time.time())
    spans = InMemorySpanExporter()
    tracer = AgentTracer(TraceConfig(otlp_endpoint=DEAD_COLLECTOR, otlp_export_timeout_s=0.5,
                                     capture_content=True, store_path=str(tmp_path / "t.sqlite3")),
                         span_processors=(SimpleSpanProcessor(spans),), clock=clock, environ={})
    tracer.start()
    prompt = "p" * 300_000
    try:
        _one_step_session(tracer, clock, "acme", "big", prompt)
        assert tracer.flush(5.0)
        chat = next(s for s in spans.get_finished_spans() if s.name == "chat tiny")
        assert len(chat.attributes[INPUT]) == 64 * 1024       # the documented default
        content = step_content(tracer.store_path, "acme", "big", 0)
        assert content["new_messages"][0]["content"] == prompt
    finally:
        tracer.stop(timeout_s=5.0)


def _long_attribute_length(config: TraceConfig, environ: dict) -> int:
    spans = InMemorySpanExporter()
    provider = otel_setup.build_provider(config, (SimpleSpanProcessor(spans),), environ)
    try:
        provider.get_tracer("t").start_span("s", attributes={INPUT: "x" * 200_000}).end()
        return len(spans.get_finished_spans()[0].attributes[INPUT])
    finally:
        provider.shutdown()


@pytest.mark.parametrize("config, environ, expected", [
    (TraceConfig(otlp_endpoint=DEAD_COLLECTOR, **QUICK), {}, 65536),
    (TraceConfig(otlp_endpoint=DEAD_COLLECTOR, **QUICK), {"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "1000"}, 1000),
    (TraceConfig(otlp_endpoint=DEAD_COLLECTOR, **QUICK), {"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "1000",
                                                          "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "500"}, 500),
    (TraceConfig(otlp_endpoint=DEAD_COLLECTOR, otlp_attribute_max_length=300, **QUICK),
     {"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "500"}, 300),
    (TraceConfig(), {}, 200_000),                       # nothing exported: nothing to bound
])
def test_the_attribute_limit_is_the_files_then_the_standard_variables_then_64k(config, environ, expected):
    assert _long_attribute_length(config, environ) == expected


class _RecordingExporter(SpanExporter):
    def __init__(self) -> None:
        self.batches: list[list] = []

    def export(self, spans):
        self.batches.append(list(spans))
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass


def _spans(sizes: list[tuple[str, int]]) -> list:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    for name, size in sizes:
        provider.get_tracer("t").start_span(name, attributes={INPUT: "x" * size}).end()
    return list(spans.get_finished_spans())


def test_a_batch_goes_in_parts_under_the_byte_budget_in_order():
    from agents_trace.otlp_export_bounds import ByteBudgetSpanExporter, estimated_span_bytes

    spans = _spans([("alpha1", 2_000_000), ("beta", 10), ("alpha2", 2_000_000),
                    ("alpha3", 5_000_000), ("gamma", 10)])
    inner = _RecordingExporter()
    assert ByteBudgetSpanExporter(inner, 3 * 1024 * 1024).export(spans) is SpanExportResult.SUCCESS
    assert [[s.name for s in part] for part in inner.batches] == [
        ["alpha1", "beta"], ["alpha2"], ["alpha3"], ["gamma"]]   # the one over the budget alone
    assert all(len(part) == 1 or sum(map(estimated_span_bytes, part)) <= 3 * 1024 * 1024
               for part in inner.batches)


def test_one_tenants_large_prompts_do_not_get_anothers_spans_refused_over_grpc(tmp_path):
    """The QA repro (M2): a collector's 4 MiB gRPC limit refused the whole batch, beta's span too."""
    received: list = []

    class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):  # noqa: N802 - the generated API
            received.extend(span.name + ":" + next(a.value.string_value for a in span.attributes
                                                     if a.key == "stepahead.tenant")
                            for r in request.resource_spans for sc in r.scope_spans for span in sc.spans)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))   # grpc's default 4 MiB limit
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Receiver(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    clock = ManualClock(time.time())
    tracer = AgentTracer(TraceConfig(otlp_endpoint=f"http://127.0.0.1:{port}", otlp_protocol="grpc",
                                     otlp_export_timeout_s=1.0, capture_content=True, store_enabled=False),
                         clock=clock, environ={"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "3000000"})
    tracer.start()
    try:
        _one_step_session(tracer, clock, "alpha", "a1", "a" * 2_000_000)
        _one_step_session(tracer, clock, "beta", "b1", "tiny")
        _one_step_session(tracer, clock, "alpha", "a2", "b" * 2_000_000)
        _one_step_session(tracer, clock, "alpha", "a3", "c" * 2_000_000)
    finally:
        tracer.stop(timeout_s=5.0)
        server.stop(grace=None)
    assert "chat tiny:beta" in received
    assert sorted(received).count("chat tiny:alpha") == 3


def _silent_collector() -> socket.socket:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)                                     # accepts, never answers
    return silent


def test_the_final_flush_to_a_collector_that_never_answers_is_bounded(monkeypatch):
    """The QA repro (L6): a slow collector stretched the stop by the 10 s export timeout."""
    monkeypatch.setattr(otel_setup, "FINAL_FLUSH_S", 0.5, raising=False)
    assert _stop_s_beside_a_silent_collector({}) < 4.0   # 10 s + retries before


def _stop_s_beside_a_silent_collector(environ: dict, after_stop=lambda: None) -> float:
    """How long a tracer's stop takes that exported three sessions to a collector that
    accepts and never answers (`environ`: the tracer's; `after_stop` runs once it is timed)."""
    silent = _silent_collector()
    clock = ManualClock(time.time())
    tracer = AgentTracer(TraceConfig(otlp_endpoint=f"http://127.0.0.1:{silent.getsockname()[1]}",
                                     store_enabled=False), clock=clock, environ=environ)
    tracer.start()
    try:
        for i in range(3):
            _one_step_session(tracer, clock, "acme", f"s{i}", "hello")
    finally:
        began_s = time.monotonic()
        tracer.stop(timeout_s=5.0)
        stop_s = time.monotonic() - began_s
        after_stop()
        silent.close()
    return stop_s


def test_qa213_every_exporters_final_flush_shares_one_deadline(monkeypatch):
    """QA213 F9: each exporter's processor waited its own FINAL_FLUSH_S, so a silent
    collector and a stuck console (a stdout nobody reads) took twice the documented bound."""
    import io
    import sys

    release = threading.Event()

    class StuckOut(io.StringIO):
        def write(self, text):
            release.wait(30.0)
            return len(text)

    monkeypatch.setattr(otel_setup, "FINAL_FLUSH_S", 1.5, raising=False)
    monkeypatch.setattr(sys, "stdout", StuckOut())
    stop_s = _stop_s_beside_a_silent_collector({"OTEL_TRACES_EXPORTER": "otlp,console"}, after_stop=release.set)
    assert stop_s < 1.5 + 0.9                             # 3 s (1.5 s each) before


def test_after_the_final_flush_deadline_nothing_more_is_sent():
    from agents_trace.otlp_export_bounds import ByteBudgetSpanExporter, FinalFlushBoundedProcessor

    release = threading.Event()

    class Stuck(_RecordingExporter):
        def export(self, spans):
            super().export(spans)
            release.wait(30.0)
            return SpanExportResult.SUCCESS

    inner = Stuck()
    processor = FinalFlushBoundedProcessor(ByteBudgetSpanExporter(inner), final_flush_s=0.2,
                                           max_export_batch_size=1, schedule_delay_millis=60_000)
    for span in _spans([("a", 1), ("b", 1), ("c", 1)]):
        processor.on_end(span)
    began_s = time.monotonic()
    processor.shutdown()
    assert time.monotonic() - began_s < 3.0
    release.set()
    time.sleep(0.05)
    assert len(inner.batches) == 1                        # the one in flight; b and c dropped


def test_sdk_export_failures_log_once_a_minute_with_a_count():
    from agents_trace.otlp_failure_log import OncePerIntervalFilter

    clock = ManualClock(0.0)
    quiet = OncePerIntervalFilter(60.0, clock)

    def record(level: int, msg: str) -> logging.LogRecord:
        return logging.LogRecord("otel", level, __file__, 1, msg, (), None)

    assert quiet.filter(record(logging.WARNING, "Transient error Connection refused encountered "
                               "while exporting span batch, retrying in 1.00s."))
    assert not quiet.filter(record(logging.WARNING, "Transient error ..., retrying in 2.00s."))
    assert not quiet.filter(record(logging.ERROR, "Failed to export traces"))
    assert not quiet.filter(record(logging.WARNING, "Queue full, dropping span."))
    assert quiet.filter(record(logging.DEBUG, "details"))
    clock.advance(61.0)
    passed = record(logging.ERROR, "Failed to export traces")
    assert quiet.filter(passed)
    assert passed.getMessage() == "Failed to export traces (and 3 more export failure lines in the last 60 s)"


def test_the_sdks_truncation_notice_is_dropped_once_export_is_on(caplog):
    """Every long captured conversation is cut by design: one SDK warning per chat span was noise."""
    caplog.set_level(logging.WARNING)
    _long_attribute_length(TraceConfig(otlp_endpoint=DEAD_COLLECTOR, **QUICK), {})
    assert not [r for r in caplog.records if "exceeds max length" in r.getMessage()]
