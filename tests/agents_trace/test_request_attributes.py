"""A chat span carries the GenAI conventions' request attributes the request states
(QA149 F4): `gen_ai.request.stop_sequences`, `…frequency_penalty`, `…presence_penalty`,
`…choice.count` (only when not 1), beside max_tokens, temperature, top_p and seed; and
`server.address`/`server.port` from the Host header the gateway was reached by."""
from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.common._internal import _encode_attributes
from starlette.datastructures import Headers

from agents_trace.records import StepResult

from tests.agents_trace.helpers import ManualClock, make_tracer

MESSAGES = [{"role": "user", "content": "hi"}]


def _chat_attributes(tmp_path, body: dict, headers: dict | Headers, **begin) -> dict:
    clock = ManualClock()
    tracer, exporter = make_tracer(tmp_path, clock)
    try:
        ctx = tracer.begin("acme", headers, {"model": "tiny", "messages": MESSAGES, **body}, **begin)
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=5, num_output_tokens=2, finish_reason="stop", output_text="ok"))
        assert tracer.flush(5.0)
        [chat] = [s for s in exporter.get_finished_spans() if s.attributes.get("gen_ai.operation.name") == "chat"]
    finally:
        tracer.stop()
    _encode_attributes(chat.attributes)   # OTLP encodes every one
    return dict(chat.attributes)


def test_a_chat_span_has_the_requests_stop_penalties_choice_count_and_server(tmp_path):
    attributes = _chat_attributes(tmp_path, {
        "n": 2, "stop": ["zz", "yy"], "frequency_penalty": 0.1, "presence_penalty": 0.2, "temperature": 0.7,
        "top_p": 0.9, "seed": 7, "max_tokens": 16}, Headers({"Host": "gw.example.com:8443", "x-session-id": "p"}))
    assert list(attributes["gen_ai.request.stop_sequences"]) == ["zz", "yy"]
    assert (attributes["gen_ai.request.frequency_penalty"], attributes["gen_ai.request.presence_penalty"]) == (0.1, 0.2)
    assert attributes["gen_ai.request.choice.count"] == 2
    assert (attributes["gen_ai.request.temperature"], attributes["gen_ai.request.top_p"],
            attributes["gen_ai.request.seed"], attributes["gen_ai.request.max_tokens"]) == (0.7, 0.9, 7, 16)
    assert (attributes["server.address"], attributes["server.port"]) == ("gw.example.com", 8443)


@pytest.mark.parametrize("host, server", [
    ("127.0.0.1:21940", ("127.0.0.1", 21940)), ("[::1]:21941", ("::1", 21941)), ("LocalHost", ("localhost", 80)),
    ("bad host\x1b[31m", (None, None)), ("x:99999", (None, None)), ("", (None, None)), (None, (None, None))])
def test_the_server_is_the_host_header_when_well_formed(tmp_path, host, server):
    headers = {"x-session-id": "h"} if host is None else {"host": host, "x-session-id": "h"}
    attributes = _chat_attributes(tmp_path, {}, headers)
    assert (attributes.get("server.address"), attributes.get("server.port")) == server


@pytest.mark.parametrize("body, stops, count", [
    ({"n": 1, "stop": "END"}, ["END"], None), ({"stop": []}, None, None), ({"stop": ["a", 3]}, None, None),
    ({"n": True, "stop": None}, None, None), ({"n": 3}, None, 3)])
def test_one_choice_and_odd_stops_state_nothing(tmp_path, body, stops, count):
    attributes = _chat_attributes(tmp_path, body, {"x-session-id": "o"})
    stated = attributes.get("gen_ai.request.stop_sequences")
    assert (None if stated is None else list(stated), attributes.get("gen_ai.request.choice.count")) == (stops, count)


@pytest.mark.parametrize("host, scheme, server", [
    ("gw.example.com", "http", ("gw.example.com", 80)), ("gw.example.com", "https", ("gw.example.com", 443)),
    ("gw.example.com:8080", "https", ("gw.example.com", 8080)), ("[::1]", "https", ("::1", 443))])
def test_qa213_server_port_is_always_set_with_the_address(tmp_path, host, scheme, server):
    """QA213 F4: `Host: gw.example.com` gave `server.address` without the port the conventions
    require with it: the Host's, else the request scheme's default."""
    attributes = _chat_attributes(tmp_path, {}, {"host": host, "x-session-id": "p4"}, scheme=scheme)
    assert (attributes.get("server.address"), attributes.get("server.port")) == server


@pytest.mark.parametrize("body, expected", [
    ({"response_format": {"type": "json_object"}}, "json"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}}, "json"),
    ({"response_format": {"type": "text"}}, "text"), ({}, None), ({"response_format": "json"}, None),
    ({"response_format": {"type": "grammar"}}, None)])
def test_qa213_the_output_type_is_the_requests_format(tmp_path, body, expected):
    """QA213 F6: `gen_ai.output.type` was never set; "json" for json_object/json_schema (a
    Responses request's `text.format` reaches the tracer as `response_format`), "text" for
    text, absent when the request names none."""
    assert _chat_attributes(tmp_path, body, {"x-session-id": "p6"}).get("gen_ai.output.type") == expected
