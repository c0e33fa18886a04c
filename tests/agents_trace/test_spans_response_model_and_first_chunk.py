"""A chat span names a `gen_ai.response.model` only when a model made a response (not for a
request refused, for an unknown model, or failed upstream before any model ran), and has
`gen_ai.response.time_to_first_chunk` only when it was streamed (the GenAI conventions
define it for streaming); `stepahead.ttft_s` stays on every step that has one."""
from __future__ import annotations

from agents_trace.records import StepResult

from tests.agents_trace.helpers import ManualClock, make_tracer

MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
RESPONSE_MODEL = "gen_ai.response.model"
FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"


def _chats(exporter) -> dict[str, dict]:
    return {span.attributes["gen_ai.conversation.id"]: dict(span.attributes)
            for span in exporter.get_finished_spans() if span.attributes.get("gen_ai.operation.name") == "chat"}


def test_only_a_step_a_model_answered_names_the_response_model(tmp_path):
    tracer, exporter = make_tracer(tmp_path, ManualClock())
    try:
        for session, model, result in (
                ("answered", "tiny", StepResult(num_input_tokens=9, num_output_tokens=3, worker="w0",
                                                finish_reason="stop")),
                ("cut", "tiny", StepResult(num_input_tokens=9, num_output_tokens=2, ttft_s=0.02, worker="w0",
                                           error="client_closed")),
                ("refused", "tiny", StepResult(num_input_tokens=9, error="rate_limit_exceeded")),
                ("unknown", "nope-model", StepResult(error="model_not_found")),
                ("upstream-500", "up", StepResult(error="api_error", error_message="upstream failed"))):
            ctx = tracer.begin("acme", {"x-session-id": session}, {"model": model, "messages": MESSAGES})
            tracer.end(ctx, result)
        assert tracer.flush(5.0)
        chats = _chats(exporter)
        assert chats["answered"][RESPONSE_MODEL] == chats["cut"][RESPONSE_MODEL] == "tiny"
        for session, model in (("refused", "tiny"), ("unknown", "nope-model"), ("upstream-500", "up")):
            assert RESPONSE_MODEL not in chats[session]
            assert chats[session]["gen_ai.request.model"] == model
    finally:
        tracer.stop()


def test_time_to_first_chunk_is_a_streamed_steps_only(tmp_path):
    tracer, exporter = make_tracer(tmp_path, ManualClock())
    try:
        for session, stream in (("streamed", True), ("whole", False)):
            ctx = tracer.begin("acme", {"x-session-id": session},
                               {"model": "tiny", "messages": MESSAGES, "stream": stream})
            tracer.end(ctx, StepResult(num_input_tokens=9, num_output_tokens=3, ttft_s=0.25, worker="w0",
                                       finish_reason="stop"))
        assert tracer.flush(5.0)
        chats = _chats(exporter)
        assert chats["streamed"][FIRST_CHUNK] == 0.25 and chats["streamed"]["gen_ai.request.stream"] is True
        assert FIRST_CHUNK not in chats["whole"] and chats["whole"]["gen_ai.request.stream"] is False
        assert chats["whole"]["stepahead.ttft_s"] == chats["streamed"]["stepahead.ttft_s"] == 0.25
    finally:
        tracer.stop()
