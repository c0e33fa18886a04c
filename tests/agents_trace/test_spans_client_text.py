"""Client-chosen text in spans and the store stays bounded and one printable line (a model
name, a tool name from `messages`, an agent name), and a request parameter OTLP cannot
encode (an int outside int64) never becomes an attribute, nor a traceback per span."""
from __future__ import annotations

import logging
import sqlite3

import pytest
from opentelemetry.exporter.otlp.proto.common import _internal as otlp_encoding

from agents_trace.conversation import MAX_CLIENT_ID_CHARS
from agents_trace.otlp_failure_log import OncePerIntervalFilter, SDK_EXPORT_LOGGERS, quiet_sdk_export_logging
from agents_trace.records import StepResult

from tests.agents_trace.helpers import ManualClock, make_tracer, tool_call_message

CONTROLS = "".join(map(chr, range(0x20))) + "\x7f"


def _steps(tmp_path, *bodies: dict, headers: dict | None = None):
    """(the exported spans, the stored steps' models) of one session's requests with `bodies`."""
    clock = ManualClock()
    tracer, exporter = make_tracer(tmp_path, clock)
    try:
        for body in bodies:
            ctx = tracer.begin("acme", headers or {"x-session-id": "s-1"}, body)
            clock.advance(0.5)
            tracer.end(ctx, StepResult(num_input_tokens=10, num_output_tokens=2, finish_reason="stop"))
            clock.advance(1.0)
        tracer.end_all_sessions()
        assert tracer.flush(5.0)
    finally:
        tracer.stop()
    with sqlite3.connect(tmp_path / "traces.sqlite3") as db:
        models = [model for (model,) in db.execute("SELECT model FROM steps ORDER BY idx")]
    return exporter.get_finished_spans(), models


def _one_step(tmp_path, body: dict):
    spans, [model] = _steps(tmp_path, body)
    return spans, model


def _by_op(spans, op):
    return [s for s in spans if s.attributes.get("gen_ai.operation.name") == op]


def test_a_huge_model_name_is_cut_in_the_store_span_name_and_attribute(tmp_path):
    spans, stored = _one_step(tmp_path, {"model": "M" * 500_000, "messages": [{"role": "user", "content": "hi"}]})
    [chat] = _by_op(spans, "chat")
    assert stored == "M" * MAX_CLIENT_ID_CHARS
    assert chat.name == "chat " + "M" * MAX_CLIENT_ID_CHARS
    assert chat.attributes["gen_ai.request.model"] == "M" * MAX_CLIENT_ID_CHARS


def test_control_characters_in_client_names_are_escaped_in_span_names(tmp_path):
    model = "nomodel\nINJECTED\x1b[31m" + CONTROLS
    first = [{"role": "user", "content": "hi"}]   # a tool's name from the history, not from a reply
    messages = [*first, tool_call_message("c1", "evil\ntool\x1b[31m"),
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    spans, [stored, _] = _steps(tmp_path, {"model": model, "messages": first}, {"model": model, "messages": messages},
                                headers={"x-session-id": "s-1", "x-agent-name": "bot%0Aline%1B"})
    names = [span.name for span in spans]
    assert stored.startswith("nomodel\nINJECTED")   # the store keeps the text (its viewers escape it)
    assert not any(ch in name for name in names for ch in CONTROLS), names
    chat = _by_op(spans, "chat")[0]
    assert chat.name.startswith("chat nomodel\\nINJECTED\\x1b[31m")
    assert [s.name for s in _by_op(spans, "execute_tool")] == ["execute_tool evil\\ntool\\x1b[31m"]
    assert [s.name for s in _by_op(spans, "invoke_agent")] == ["invoke_agent bot\\nline\\x1b"]


@pytest.mark.parametrize("field, value, kept", [
    ("max_tokens", 10**30, False), ("max_tokens", 2**63, False), ("max_tokens", 2**63 - 1, True),
    ("max_completion_tokens", -(2**63) - 1, False), ("seed", 2**70, False), ("seed", 7, True)])
def test_an_int_parameter_outside_int64_is_not_a_span_attribute(tmp_path, field, value, kept):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], field: value,
            "temperature": 0.5, **({"max_tokens": 5} if field == "max_completion_tokens" else {})}
    [chat] = _by_op(_one_step(tmp_path, body)[0], "chat")
    name = "gen_ai.request." + ("max_tokens" if field.startswith("max_") else field)
    assert chat.attributes.get(name) == (value if kept else None)   # (never the other max_tokens field's)
    assert chat.attributes["gen_ai.request.temperature"] == 0.5
    otlp_encoding._encode_attributes(chat.attributes)   # encodes without a "Failed to encode key"


def test_the_otlp_encoders_failure_line_is_kept_to_one_a_minute(caplog):
    assert otlp_encoding._logger.name in SDK_EXPORT_LOGGERS   # the encoder's real logger
    quiet_sdk_export_logging()
    assert any(isinstance(f, OncePerIntervalFilter) for f in otlp_encoding._logger.filters)
    with caplog.at_level(logging.WARNING, logger=otlp_encoding._logger.name):
        for _ in range(3):
            otlp_encoding._encode_attributes({"gen_ai.request.max_tokens": 10**30})
    failures = [r for r in caplog.records if r.name == otlp_encoding._logger.name]
    assert len(failures) <= 1, [r.getMessage() for r in failures]
