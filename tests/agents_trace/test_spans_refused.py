"""A step that never reached a model (its tenant's limits refused it) exports no token usage
and no response id on its chat span, nor in its session's totals, though the trace store
keeps the refused prompt's size; a step cut after the model started keeps its usage."""
from __future__ import annotations

import uuid

from agents_trace.records import Step, StepResult, ToolCall
from agents_trace.step_queries import list_steps

from tests.agents_trace.helpers import ManualClock, make_tracer

BODY = {"model": "tiny", "messages": [{"role": "user", "content": "Weather in Paris?"}]}
USAGE = ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.usage.cache_read.input_tokens")


def _chats(exporter) -> dict[str, dict]:
    """The chat spans' attributes by their step's session."""
    return {span.attributes["gen_ai.conversation.id"]: dict(span.attributes)
            for span in exporter.get_finished_spans() if span.attributes.get("gen_ai.operation.name") == "chat"}


def _end(tracer, session: str, **result) -> None:
    request_id = f"chatcmpl-{uuid.uuid4().hex}"
    ctx = tracer.begin("acme", {"x-session-id": session}, BODY, request_id=request_id)
    tracer.end(ctx, StepResult(response_id=request_id, **result))


def test_a_refused_steps_span_has_no_usage_nor_response_id_and_a_cut_ones_keeps_them(tmp_path):
    clock = ManualClock()
    tracer, exporter = make_tracer(tmp_path, clock)
    try:
        _end(tracer, "refused", num_input_tokens=26, error="rate_limit_exceeded",
             error_message="Rate limit reached.")
        _end(tracer, "queued-and-left", num_input_tokens=26, error="client_closed")
        _end(tracer, "cut", num_input_tokens=25, num_cached_tokens=16, num_output_tokens=5, ttft_s=0.02,
             worker="w0", error="client_closed")
        _end(tracer, "upstream-cut", ttft_s=0.3, error="client_closed")   # its counts unknown (0), begun
        _end(tracer, "answered", num_input_tokens=25, num_output_tokens=3, ttft_s=0.02, worker="w0",
             finish_reason="stop")
        tracer.end_all_sessions()
        assert tracer.flush(5.0)
        chats = _chats(exporter)
        for session in ("refused", "queued-and-left"):
            refused = chats[session]
            assert not any(key in refused for key in USAGE), refused
            assert "gen_ai.response.id" not in refused and refused["error.type"]
            assert refused["gen_ai.request.model"] == "tiny"
        cut = chats["cut"]
        assert [cut[key] for key in USAGE] == [25, 5, 16] and cut["gen_ai.response.id"].startswith("chatcmpl-")
        assert [chats["upstream-cut"][key] for key in USAGE] == [0, 0, 0]
        assert "gen_ai.response.id" in chats["upstream-cut"]
        assert [chats["answered"][key] for key in USAGE] == [25, 3, 0] and "gen_ai.response.id" in chats["answered"]
        [stored] = list_steps(tracer.store_path, "acme", "refused")["data"]
        assert stored["num_input_tokens"] == 26   # the store keeps the refused prompt's size
    finally:
        tracer.stop()


def test_used_tokens_are_none_for_a_step_that_never_reached_a_model(tmp_path):
    from agents_trace.spans import reached_model, used_tokens

    clock = ManualClock()
    steps = []
    tracer, _ = make_tracer(tmp_path, clock)
    tracer.subscribe(steps.append)
    try:
        _end(tracer, "s", num_input_tokens=26, error="rate_limit_exceeded")
        _end(tracer, "s", num_input_tokens=30, num_cached_tokens=26, num_output_tokens=4, ttft_s=0.01, worker="w1",
             finish_reason="stop")
        assert tracer.flush(5.0)
    finally:
        tracer.stop()
    refused, answered = [step for step in steps if isinstance(step, Step)]
    assert not reached_model(refused) and used_tokens(refused) == (0, 0, 0)
    assert reached_model(answered) and used_tokens(answered) == (30, 26, 4)


def test_a_sessions_totals_leave_out_its_refused_steps(tmp_path):
    clock = ManualClock()
    tracer, exporter = make_tracer(tmp_path, clock)
    try:
        _end(tracer, "mixed", num_input_tokens=26, error="rate_limit_exceeded")
        _end(tracer, "mixed", num_input_tokens=30, num_cached_tokens=26, num_output_tokens=4, ttft_s=0.01,
             worker="w1", finish_reason="stop")
        tracer.end_all_sessions()
        assert tracer.flush(5.0)
    finally:
        tracer.stop()
    [agent] = [span for span in exporter.get_finished_spans()
               if span.attributes.get("gen_ai.operation.name") == "invoke_agent"]
    assert [agent.attributes[key] for key in USAGE] == [30, 4, 26]


def test_a_refused_first_request_ends_its_session_at_once_and_others_stay_open(tmp_path):
    """Known cost (QA40): each refused first request held a live session (~4-20 KB) until
    the idle timeout. One nothing can continue ends at once, `failed`; a named session, a
    session with earlier steps, and a failed step that asked for calls stay open."""
    from agents_trace.store_queries import find_session
    from tests.agents_trace.helpers import tool_call_message

    tracer, _ = make_tracer(tmp_path, clock=ManualClock())
    try:
        refused = tracer.begin("acme", {}, BODY, request_id="chatcmpl-r1")
        tracer.end(refused, StepResult(response_id="chatcmpl-r1", error="rate_limit_exceeded"))
        named = tracer.begin("acme", {"x-session-id": "named"}, BODY, request_id="chatcmpl-r2")
        tracer.end(named, StepResult(response_id="chatcmpl-r2", error="rate_limit_exceeded"))
        answered = tracer.begin("acme", {}, {**BODY, "messages": BODY["messages"][:1] * 2}, request_id="chatcmpl-r3")
        tracer.end(answered, StepResult(response_id="chatcmpl-r3", output_text="Sunny."))
        after = {"messages": [*BODY["messages"] * 2, {"role": "assistant", "content": "Sunny."},
                              {"role": "user", "content": "And tomorrow?"}], "model": "tiny"}
        later = tracer.begin("acme", {}, after, request_id="chatcmpl-r4")
        assert later.session == answered.session
        tracer.end(later, StepResult(response_id="chatcmpl-r4", error="upstream_unavailable"))
        cut = tracer.begin("acme", {}, {**BODY, "messages": [{"role": "user", "content": "Book it."}]},
                           request_id="chatcmpl-r5")
        call = tool_call_message("call_1", "book")["tool_calls"][0]
        tracer.end(cut, StepResult(response_id="chatcmpl-r5", error="client_closed",
                                   tool_calls=(ToolCall("call_1", call["function"]["name"], "{}"),)))
        assert tracer.flush(5.0)
        assert tracer.num_live_sessions == 3
        [ended] = find_session(tracer.store_path, refused.session, "acme")
        assert ended["end_reason"] == "failed" and ended["num_steps"] == 1
        for ctx in (named, answered, cut):
            [kept] = find_session(tracer.store_path, ctx.session, "acme")
            assert kept["end_reason"] is None, ctx.session
    finally:
        tracer.stop()
