"""OTLP export against local receivers (http/protobuf and grpc), and the target rules."""
from __future__ import annotations

import time
from concurrent import futures

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from agents_trace.config import TraceConfig
from agents_trace.otel_setup import otlp_target
from agents_trace.tracer import AgentTracer

from tests.agents_trace.helpers import ManualClock, run_scripted_session
from tests.agents_trace.otlp_receiver import Collected, http_receiver


def _traced_session(tmp_path, endpoint: str, protocol: str) -> None:
    clock = ManualClock(time.time())
    tracer = AgentTracer(TraceConfig(otlp_endpoint=endpoint, otlp_protocol=protocol,
                                     store_enabled=False, otlp_export_timeout_s=5.0),
                         clock=clock, environ={})
    tracer.start()
    try:
        run_scripted_session(tracer, clock, headers={"x-session-id": "otlp"})
    finally:
        tracer.stop()


def _assert_agent_session(spans) -> None:
    names = sorted(span.name for span in spans)
    assert names == ["chat tiny"] * 3 + ["execute_tool book_table", "execute_tool get_weather",
                                         "invoke_agent"]
    agent = next(s for s in spans if s.name == "invoke_agent")
    assert all(s.parent_span_id == agent.span_id for s in spans if s is not agent)


def test_otlp_http_export_reaches_a_local_receiver(tmp_path):
    collected = Collected()
    server = http_receiver(collected)
    try:
        _traced_session(tmp_path, f"http://127.0.0.1:{server.server_address[1]}", "http/protobuf")
    finally:
        server.shutdown()
    _assert_agent_session(collected.spans)


def test_otlp_grpc_export_reaches_a_local_receiver(tmp_path):
    collected = Collected()

    class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):  # noqa: N802 - the generated API
            collected.add("/v1/traces", request)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Receiver(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        _traced_session(tmp_path, f"http://127.0.0.1:{port}", "grpc")
    finally:
        server.stop(grace=None)
    _assert_agent_session(collected.spans)


def test_otlp_outage_keeps_the_span_queue_bounded(tmp_path):
    clock = ManualClock(time.time())
    tracer = AgentTracer(TraceConfig(otlp_endpoint="http://127.0.0.1:9", store_enabled=False,
                                     otlp_max_queue_size=64, otlp_export_timeout_s=0.5),
                         clock=clock, environ={})
    tracer.start()
    try:
        began_s = time.monotonic()
        for i in range(100):
            run_scripted_session(tracer, clock, headers={"x-session-id": f"s{i}"})
        assert time.monotonic() - began_s < 5.0       # the request path never waits
        assert tracer._writer.flush(10.0)
        processor = tracer.provider._active_span_processor._span_processors[0]
        assert len(processor._batch_processor._queue) <= 64
    finally:
        tracer.stop(timeout_s=5.0)


@pytest.mark.parametrize("config, environ, expected", [
    (TraceConfig(), {}, None),
    (TraceConfig(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ("http/protobuf", None)),
    (TraceConfig(), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
                     "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, ("grpc", None)),
    (TraceConfig(otlp_endpoint="http://c:4318"), {}, ("http/protobuf", "http://c:4318/v1/traces")),
    (TraceConfig(otlp_endpoint="http://c:4318"), {"OTEL_TRACES_EXPORTER": "none"}, None),
    (TraceConfig(otlp_endpoint="http://c:4318"), {"OTEL_SDK_DISABLED": "true"}, None),
])
def test_otlp_target_follows_config_and_standard_env(config, environ, expected):
    target = otlp_target(config, environ)
    assert (None if target is None else (target.protocol, target.endpoint)) == expected
