"""AgentTracer: spans (GenAI conventions), parents, durations, traceparent, content,
subscribers and forecasts, with a manual clock so durations are exact."""
from __future__ import annotations


import pytest
from cache.forecast import Forecast
from opentelemetry.trace import SpanKind, StatusCode

from agents_trace.records import SessionEnded, Step, StepResult
from agents_trace.symbols import predictor_subscriber

from tests.agents_trace.helpers import ManualClock, idle_out, make_tracer, run_scripted_session


@pytest.fixture
def clock():
    return ManualClock()


def _finish(tracer):
    tracer.end_all_sessions()
    assert tracer.flush(5.0)


def _by_op(spans, op):
    return [s for s in spans if s.attributes.get("gen_ai.operation.name") == op]


def test_tracer_three_step_session_has_one_agent_three_chat_two_tool_spans(tmp_path, clock):
    tracer, exporter = make_tracer(tmp_path, clock)
    try:
        contexts = run_scripted_session(tracer, clock, headers={"x-session-id": "trip-1"})
        _finish(tracer)
        spans = exporter.get_finished_spans()
        agents, chats = _by_op(spans, "invoke_agent"), _by_op(spans, "chat")
        tools = _by_op(spans, "execute_tool")
        assert (len(agents), len(chats), len(tools)) == (1, 3, 2)
        agent = agents[0]
        assert agent.name == "invoke_agent" and agent.parent is None
        assert agent.attributes["gen_ai.conversation.id"] == "trip-1"
        for span in chats + tools:
            assert span.parent.span_id == agent.context.span_id
            assert span.context.trace_id == agent.context.trace_id
        assert [s.name for s in chats] == ["chat tiny"] * 3
        assert [s.attributes["stepahead.step.index"] for s in chats] == [0, 1, 2]
        assert [s.attributes["stepahead.step.after"] for s in chats] == [
            "start", "tool:get_weather", "tool:book_table"]
        assert chats[1].attributes["gen_ai.usage.input_tokens"] == 200
        assert chats[1].attributes["gen_ai.usage.cache_read.input_tokens"] == 80
        assert chats[1].attributes["gen_ai.usage.output_tokens"] == 20
        assert chats[1].attributes["stepahead.worker"] == "w1"
        assert chats[1].attributes["stepahead.ttft_s"] == 0.1
        assert "gen_ai.response.time_to_first_chunk" not in chats[1].attributes   # not streamed
        assert chats[0].kind == SpanKind.CLIENT   # QA213 F2: the gateway calls its model (SERVER before)
        assert [s.name for s in tools] == ["execute_tool get_weather", "execute_tool book_table"]
        assert [s.attributes["gen_ai.tool.call.id"] for s in tools] == ["call_w1", "call_b2"]
        durations = [(s.end_time - s.start_time) / 1e9 for s in tools]
        assert durations == pytest.approx([2.0, 3.0], abs=1e-6)
        assert [(s.end_time - s.start_time) / 1e9 for s in chats] == pytest.approx([0.5] * 3)
        assert agent.start_time == chats[0].start_time and agent.end_time == chats[2].end_time
        assert contexts[0].gap_s is None
        assert [c.gap_s for c in contexts[1:]] == pytest.approx([2.0, 3.0])
        assert "gen_ai.input.messages" not in chats[0].attributes
    finally:
        tracer.stop()


def test_tracer_stitches_session_by_prefix_without_any_header(tmp_path, clock):
    tracer, exporter = make_tracer(tmp_path, clock)
    try:
        contexts = run_scripted_session(tracer, clock)
        assert len({c.session for c in contexts}) == 1
        assert [c.session_source for c in contexts] == ["new", "prefix", "prefix"]
        assert [c.index for c in contexts] == [0, 1, 2]
        _finish(tracer)
        assert len(_by_op(exporter.get_finished_spans(), "invoke_agent")) == 1
    finally:
        tracer.stop()


def test_two_runs_of_one_end_user_are_two_sessions(tmp_path, clock):
    # `user` is OpenAI's end-user id, not a session (QA170: both runs were session "alice")
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        runs = [run_scripted_session(tracer, clock, body={"user": "alice"}, user_text=text)
                for text in ("Weather in Paris?", "Weather in Rome?")]
        assert [[(c.index, c.session_source) for c in run] for run in runs] == [
            [(0, "new"), (1, "prefix"), (2, "prefix")]] * 2
        assert len({c.session for c in runs[0]}) == len({c.session for c in runs[1]}) == 1
        assert runs[0][0].session != runs[1][0].session and "alice" not in (runs[0][0].session, runs[1][0].session)
    finally:
        tracer.stop()


def test_tracer_never_stitches_two_tenants_with_identical_conversations(tmp_path, clock):
    tracer, exporter = make_tracer(tmp_path, clock)
    try:
        first = run_scripted_session(tracer, clock, tenant="acme")
        second = run_scripted_session(tracer, clock, tenant="globex")
        assert len({c.session for c in first}) == 1 and len({c.session for c in second}) == 1
        assert first[0].session != second[0].session
        assert [c.index for c in second] == [0, 1, 2]
        _finish(tracer)
        agents = _by_op(exporter.get_finished_spans(), "invoke_agent")
        assert sorted(a.attributes["stepahead.tenant"] for a in agents) == ["acme", "globex"]
    finally:
        tracer.stop()


def test_tracer_continues_incoming_traceparent_without_ending_it(tmp_path, clock):
    tracer, exporter = make_tracer(tmp_path, clock)
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    try:
        run_scripted_session(tracer, clock, headers={
            "traceparent": f"00-{trace_id}-{parent_id}-01", "x-session-id": "tp"})
        _finish(tracer)
        spans = exporter.get_finished_spans()
        assert all(f"{s.context.trace_id:032x}" == trace_id for s in spans)
        assert all(f"{s.context.span_id:016x}" != parent_id for s in spans)
        agent = _by_op(spans, "invoke_agent")[0]
        assert f"{agent.parent.span_id:016x}" == parent_id and agent.parent.is_remote
        for chat in _by_op(spans, "chat"):
            assert f"{chat.parent.span_id:016x}" == parent_id
            assert chat.links[0].context.span_id == agent.context.span_id
        for tool in _by_op(spans, "execute_tool"):
            assert tool.parent.span_id == agent.context.span_id
    finally:
        tracer.stop()


def test_tracer_captures_content_only_when_opted_in(tmp_path, clock):
    tracer, exporter = make_tracer(tmp_path, clock, capture_content=True)
    try:
        run_scripted_session(tracer, clock)
        _finish(tracer)
        chats = _by_op(exporter.get_finished_spans(), "chat")
        assert '"tool_call_response"' in chats[1].attributes["gen_ai.input.messages"]
        assert "Booked. Sunny." in chats[2].attributes["gen_ai.output.messages"]
    finally:
        tracer.stop()


def test_a_cut_steps_span_carries_the_output_its_client_was_sent_and_a_failed_one_none(tmp_path, clock):
    tracer, exporter = make_tracer(tmp_path, clock, capture_content=True)
    try:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "x"}]}
        cut = tracer.begin("acme", {"x-session-id": "cut"}, body)
        tracer.end(cut, StepResult(num_input_tokens=5, num_output_tokens=3, error="client_closed",
                                   output_text="Once upon"))
        failed = tracer.begin("acme", {"x-session-id": "failed"}, body)
        tracer.end(failed, StepResult(num_input_tokens=5, error="server_error", error_message="worker died"))
        _finish(tracer)
        cut_span, failed_span = _by_op(exporter.get_finished_spans(), "chat")
        assert "Once upon" in cut_span.attributes["gen_ai.output.messages"]
        assert "gen_ai.output.messages" not in failed_span.attributes
    finally:
        tracer.stop()


def test_tracer_error_step_sets_span_status_and_error_type(tmp_path, clock):
    tracer, exporter = make_tracer(tmp_path, clock)
    try:
        ctx = tracer.begin("acme", {}, {"model": "tiny", "messages": [{"role": "user",
                                                                        "content": "x"}]})
        tracer.end(ctx, StepResult(num_input_tokens=5, error="server_error",
                                   error_message="worker died"))
        tracer.end(ctx, StepResult(num_input_tokens=5))   # a second end is ignored
        _finish(tracer)
        chats = _by_op(exporter.get_finished_spans(), "chat")
        assert len(chats) == 1
        assert chats[0].status.status_code == StatusCode.ERROR
        assert chats[0].attributes["error.type"] == "server_error"
    finally:
        tracer.stop()


class _Recorder:
    def __init__(self) -> None:
        self.waits: list = []
        self.symbols: list[tuple[str, str, float]] = []

    def observe(self, tenant, session, symbol, t_s, gap_s):
        self.symbols.append((tenant, symbol, gap_s))

    def mark_waiting(self, tenant, session, t_s, tool_calls=()):
        self.waits.append((session, t_s, tool_calls))


def test_tracer_feeds_subscribers_and_checks_forecasts(tmp_path, clock):
    tracer, exporter = make_tracer(tmp_path, clock)
    events: list = []
    recorder = _Recorder()
    tracer.subscribe(events.append)
    tracer.subscribe(predictor_subscriber(recorder, clock))
    guesses = iter(["get_weather", "search", "book_table"])

    made_at: list[float] = []

    def forecaster(tenant, session, now_s):
        made_at.append(now_s)
        return Forecast(tenant, session, now_s, next_step={next(guesses): 0.7, "END": 0.3},
                        eta_quantiles_s=((0.5, 2.5),))

    tracer.set_forecaster(forecaster)
    try:
        run_scripted_session(tracer, clock, headers={"x-session-id": "f"})
        _finish(tracer)
        assert [type(e) for e in events] == [Step, Step, Step, SessionEnded]
        assert [s for _, s, _ in recorder.symbols] == [
            "USER", "get_weather", "book_table", "ASSISTANT_TEXT", "END"]
        assert [g for _, s, g in recorder.symbols][1:3] == pytest.approx([2.0, 3.0])
        # Each step's session waits from its response's end, on the tools it asked for.
        steps = [e for e in events if isinstance(e, Step)]
        assert recorder.waits == [(step.session, step.ended_s, tools) for step, tools in
                                  zip(steps, [("get_weather",), ("book_table",), ()])]
        chats = _by_op(exporter.get_finished_spans(), "chat")
        assert "stepahead.forecast.hit" not in chats[0].attributes
        assert chats[1].attributes["stepahead.forecast.next_step"] == "get_weather"
        assert chats[1].attributes["stepahead.forecast.hit"] is True
        assert chats[2].attributes["stepahead.forecast.actual"] == "book_table"
        assert chats[2].attributes["stepahead.forecast.hit"] is False
        # the ETA (2.5 s after the forecast was made) is told from the previous response's
        # end, as the gap is: the writer's clock had moved on when it asked
        assert made_at[1] >= steps[1].ended_s
        assert chats[2].attributes["stepahead.forecast.eta_p50_s"] == pytest.approx(
            made_at[1] + 2.5 - steps[1].ended_s)
    finally:
        tracer.stop()


def test_tracer_expires_idle_sessions_and_ends_their_agent_span(tmp_path, clock):
    tracer, exporter = make_tracer(tmp_path, clock, sweep_interval_s=0.02,
                                   session_idle_timeout_s=60.0)
    try:
        run_scripted_session(tracer, clock)
        assert tracer.flush(5.0) and tracer.num_live_sessions == 1
        idle_out(tracer, clock, 61.0)
        agents = _by_op(exporter.get_finished_spans(), "invoke_agent")
        assert len(agents) == 1
        assert agents[0].attributes["stepahead.session.end_reason"] == "idle"
    finally:
        tracer.stop()


def test_tracer_full_queue_drops_and_counts_instead_of_blocking(tmp_path, clock):
    tracer, _ = make_tracer(tmp_path, clock, queue_size=1)
    tracer._writer.stop(5.0)     # nobody drains: the queue fills at once
    for _ in range(5):
        ctx = tracer.begin("acme", {}, {"model": "tiny", "messages": []})
        tracer.end(ctx, StepResult())
    assert tracer.stats.num_dropped == 4
    tracer.provider.shutdown()


def test_tracer_continues_a_session_from_any_choice_of_an_n2_step(tmp_path, clock):
    """The agent kept choice 1 (a tool call), not choice 0: the next request, with no
    session header, still continues the session and follows that tool."""
    from agents_trace.records import ChoiceOutput, ToolCall

    tracer, _ = make_tracer(tmp_path, clock)
    try:
        asked = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Weather?"}]
        first = tracer.begin("acme", {}, {"model": "tiny", "n": 2, "messages": asked})
        clock.advance(1.0)
        tracer.end(first, StepResult(finish_reason="stop", output_text="Sunny.", other_choices=(
            ChoiceOutput("tool_calls", (ToolCall("c9", "get_weather", "{}"),)),)))
        clock.advance(2.0)
        kept = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c9", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}
        second = tracer.begin("acme", {}, {"model": "tiny", "messages": asked + [
            kept, {"role": "tool", "tool_call_id": "c9", "content": "sun"}]})
        assert (second.session, second.session_source) == (first.session, "prefix")
        assert second.after.label == "tool:get_weather"
        tracer.end(second, StepResult(finish_reason="stop", output_text="ok"))
    finally:
        tracer.stop()


def test_tracer_counts_the_steps_begun_and_not_ended(tmp_path, clock):
    tracer, _ = make_tracer(tmp_path, clock)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    first = tracer.begin("acme", {"x-session-id": "a"}, body)
    second = tracer.begin("acme", {"x-session-id": "b"}, body)
    assert tracer.num_steps_in_flight() == 2
    tracer.end(first, StepResult(num_input_tokens=3, num_output_tokens=1, finish_reason="stop"))
    assert tracer.num_steps_in_flight() == 1
    tracer.end(second, StepResult(num_input_tokens=3, error="server_error"))   # a failed step ends too
    assert tracer.num_steps_in_flight() == 0
    tracer.stop()


def test_a_step_arrives_when_the_gateway_began_it_never_before_its_previous_end(tmp_path, clock):
    """QA137 #5: a step was opened as arriving when the gateway had prepared it (body read,
    prompt tokenized), while its TTFT counted from when the handler began, so a whole
    reply's TTFT could exceed the step's own duration. `arrived_ago_s` moves the arrival
    back to the handler's start, but never before the session's previous response ended."""
    tracer, _ = make_tracer(tmp_path, clock)
    try:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
        first = tracer.begin("acme", {"x-session-id": "s"}, body, arrived_ago_s=0.25)
        assert first.arrived_s == clock.now_s - 0.25 and first.gap_s is None
        clock.advance(1.0)
        tracer.end(first, StepResult(num_input_tokens=5, num_output_tokens=1, ttft_s=1.2, finish_reason="stop"))
        ended_s = clock.now_s
        clock.advance(2.0)
        second = tracer.begin("acme", {"x-session-id": "s"}, body, arrived_ago_s=0.5)
        assert second.arrived_s == ended_s + 1.5 and second.gap_s == pytest.approx(1.5)
        clock.advance(0.1)
        third = tracer.begin("acme", {"x-session-id": "s"}, body, arrived_ago_s=10.0)   # began before `first` ended
        assert third.arrived_s == ended_s and third.gap_s == 0.0
        assert third.arrived_late_s == pytest.approx(7.9)
        clock.advance(0.5)
        tracer.end(third, StepResult(num_input_tokens=5, num_output_tokens=1, ttft_s=8.2, finish_reason="stop"))
        assert tracer.flush(5.0)
        from agents_trace.step_queries import list_steps
        [kept] = [step for step in list_steps(tracer.store_path, "acme", "s")["data"] if step["index"] == 2]
        assert kept["ttft_s"] == pytest.approx(0.3)   # from its arrival, within its duration (QA141 M2)
        assert kept["ttft_s"] <= kept["ended_s"] - kept["arrived_s"]
    finally:
        tracer.stop()


def test_qa213_the_agent_span_has_the_first_steps_model_and_server(tmp_path, clock):
    """QA213 F8: `invoke_agent` had no `gen_ai.request.model`, `server.address`, `server.port`."""
    tracer, exporter = make_tracer(tmp_path, clock)
    try:
        run_scripted_session(tracer, clock, headers={"x-session-id": "trip-8", "host": "gw.example.com:8443"})
        _finish(tracer)
        [agent] = _by_op(exporter.get_finished_spans(), "invoke_agent")
        assert (agent.attributes["gen_ai.request.model"], agent.attributes["server.address"],
                agent.attributes["server.port"]) == ("tiny", "gw.example.com", 8443)
    finally:
        tracer.stop()


def test_qa213_the_tier_served_in_is_a_stepahead_attribute_not_an_openai_one(tmp_path, clock):
    """QA213 F3: `openai.request.service_tier` beside `gen_ai.provider.name` = stepahead."""
    tracer, exporter = make_tracer(tmp_path, clock)
    try:
        ctx = tracer.begin("acme", {"x-session-id": "tier"}, {"model": "tiny", "messages": [{"role": "user",
                                                                                              "content": "hi"}]},
                           service_tier="flex")
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=5, num_output_tokens=2, finish_reason="stop", output_text="ok"))
        _finish(tracer)
        for span in exporter.get_finished_spans():
            assert not any(key.startswith("openai.") for key in span.attributes)
        [chat] = _by_op(exporter.get_finished_spans(), "chat")
        assert chat.attributes["stepahead.service_tier"] == "flex"
    finally:
        tracer.stop()
