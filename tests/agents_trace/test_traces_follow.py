"""`stepahead traces show ID --follow` (agents_trace/traces_follow.py): the session, then each
new step once as it is stored, until the session ends; a session not stored yet, or named by a
reply's request id or percent-encoded header, is waited for; a delete of the live session is
waited out, its later steps printed, each once, even at an index the delete freed."""
from __future__ import annotations

import io
import re

from agents_trace.records import StepResult, ToolCall
from agents_trace.store_delete import delete_sessions
from agents_trace.traces_follow import follow_session

from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session, tool_call_message


def test_show_follow_prints_the_session_then_each_new_step_once_until_it_ends(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    path = tmp_path / "traces.sqlite3"
    messages = [{"role": "user", "content": "weather?"}]

    def step(index: int, call: str | None) -> None:
        ctx = tracer.begin("acme", {"x-session-id": "live"}, {"model": "tiny", "messages": list(messages)})
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=50 * (index + 1), num_cached_tokens=40 * index,
                                   num_output_tokens=5, ttft_s=0.2, worker="w0",
                                   finish_reason="tool_calls" if call else "stop",
                                   tool_calls=(ToolCall(f"c{index}", call, "{}"),) if call else (),
                                   output_text="" if call else "Sunny."))
        if call:
            messages.extend([tool_call_message(f"c{index}", call), {"role": "tool", "tool_call_id": f"c{index}",
                                                                    "content": "18 C"}])
        clock.advance(1.0)
        assert tracer.flush()

    waits = []

    def sleep(seconds: float) -> None:   # what the agent and the gateway do meanwhile
        waits.append(seconds)
        if len(waits) == 1:
            step(0, "get_weather")       # the session appears
        elif len(waits) == 3:
            step(1, None)                # a second step, shown once
        elif len(waits) == 5:
            tracer.stop()                # the gateway stops: the session ends

    out, note = io.StringIO(), io.StringIO()
    assert follow_session(path, "live", None, with_content=True, out=out, note=note, poll_s=0.25,
                          sleep=sleep) == 0
    text = out.getvalue()
    assert waits == [0.25] * 5
    assert "waiting for session 'live'" in note.getvalue() and "following 'live'" in note.getvalue()
    assert text.count("#0 request:") == 1 and text.count("#1 request:") == 1   # every step once
    assert re.search(r"^#1  at \d\.\d+ s  after tool:get_weather \(1\.000 s\)  prompt 100, cached 40 \(40%\)"
                     r"  TTFT 200\.0 ms  5 out  tiny on w0  asked for text answer", text, re.M), text
    assert "  assistant: Sunny." in text and text.rstrip().endswith("session 'live' ended (shutdown)")


def test_show_follow_of_a_request_id_not_stored_yet_finds_its_session_once_the_step_is(tmp_path):
    """A reply's x-request-id pasted before the gateway stored its step: the wait ends at
    that step's session, not at a session named like the request (which never comes)."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    path = tmp_path / "traces.sqlite3"
    waits = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:
            ctx = tracer.begin("acme", {"x-session-id": "agent-7"},
                               {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
            clock.advance(0.5)
            tracer.end(ctx, StepResult(num_input_tokens=20, num_cached_tokens=0, num_output_tokens=3, ttft_s=0.1,
                                       worker="w0", finish_reason="stop", response_id="chatcmpl-late"))
            tracer.stop()   # stores the step, and ends the session

    out, note = io.StringIO(), io.StringIO()
    assert follow_session(path, "chatcmpl-late", None, with_content=False, out=out, note=note, poll_s=0.25,
                          sleep=sleep) == 0
    assert len(waits) == 2 and "waiting for session 'chatcmpl-late'" in note.getvalue()
    assert out.getvalue().startswith("session agent-7   tenant acme"), out.getvalue()


def test_show_follow_waits_for_the_session_an_answers_percent_encoded_header_names(tmp_path):
    """`show 'caf%C3%A9' --follow` started before the agent: the session `café` that then
    appears is the one followed (it used to wait for a session named `caf%C3%A9`)."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    waits = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 1:
            run_scripted_session(tracer, clock, tenant="acme", headers={"x-session-id": "caf%C3%A9"})
            tracer.stop()   # stored, and ended
        assert len(waits) < 10, "still waiting for a session named 'caf%C3%A9'"

    out, note = io.StringIO(), io.StringIO()
    assert follow_session(tmp_path / "traces.sqlite3", "caf%C3%A9", None, with_content=False, out=out,
                          note=note, poll_s=0.25, sleep=sleep) == 0
    assert waits == [0.25] and "waiting for session 'caf%C3%A9'" in note.getvalue()
    assert out.getvalue().startswith("session café") and "3 steps" in out.getvalue()
    assert out.getvalue().rstrip().endswith("session 'café' ended (shutdown)")


def test_show_follow_waits_out_a_delete_of_the_live_session_and_prints_the_steps_it_goes_on_with(tmp_path):
    """QA200 F3: a live session deleted while followed is said so, then followed on: the
    steps its agent stores under its id afterwards are printed, each once."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    path = tmp_path / "traces.sqlite3"
    messages = [{"role": "user", "content": "go"}]

    def step(reply: str) -> None:
        ctx = tracer.begin("acme", {"x-session-id": "live"}, {"model": "tiny", "messages": list(messages)})
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=20, num_output_tokens=2, ttft_s=0.1, worker="w0",
                                   finish_reason="stop", output_text=reply))
        messages.extend([{"role": "assistant", "content": reply}, {"role": "user", "content": "more"}])
        clock.advance(1.0)
        assert tracer.flush()

    step("first")
    waits = []

    def sleep(seconds: float) -> None:   # what the agent, the gateway and an operator do meanwhile
        waits.append(seconds)
        if len(waits) == 1:
            assert delete_sessions(path, [("acme", "live")]) == 1
        elif len(waits) == 3:
            step("after the delete")
        elif len(waits) == 5:
            tracer.stop()

    out, note = io.StringIO(), io.StringIO()
    assert follow_session(path, "live", None, with_content=True, out=out, note=note, poll_s=0.25,
                          sleep=sleep) == 0
    text = out.getvalue()
    assert "session 'live' was deleted\n" in text and "session 'live' goes on\n" in text
    assert "waiting for 'live' to go on under its id" in note.getvalue()
    assert text.index("was deleted") < text.index("goes on") < text.index("assistant: after the delete")
    assert text.count("#0 reply:") == 1 and text.count("#1 reply:") == 1   # each step once
    assert text.count("assistant: after the delete") == 1
    after = text[text.index("goes on"):]
    assert "#1 request:\n  user: go\n  assistant: first\n  user: more\n" in after   # stored whole, shown whole
    assert text.rstrip().endswith("session 'live' ended (shutdown)")


def test_show_follow_prints_a_step_stored_at_a_printed_index_a_delete_freed_between_two_polls(tmp_path):
    """QA203 F3: the delete and another gateway's step under the freed index 0 fall within
    one poll: that step is still printed (steps are told apart by request and arrival)."""
    clock = ManualClock()
    a, _ = make_tracer(tmp_path, clock)
    clock.advance(1.0)
    b, _ = make_tracer(tmp_path, clock)
    path = tmp_path / "traces.sqlite3"

    def step(tracer, reply: str) -> None:
        ctx = tracer.begin("acme", {"x-session-id": "live"}, {"model": "tiny", "messages": [
            {"role": "user", "content": reply}]})
        clock.advance(0.5)
        tracer.end(ctx, StepResult(num_input_tokens=20, num_output_tokens=2, ttft_s=0.1, worker="w0",
                                   finish_reason="stop", output_text=reply))
        clock.advance(1.0)
        assert tracer.flush()

    step(a, "first")
    waits = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 1:   # both between two polls
            assert delete_sessions(path, [("acme", "live")]) == 1
            step(b, "second")
        elif len(waits) == 2:
            a.stop()
            b.stop()

    out, note = io.StringIO(), io.StringIO()
    assert follow_session(path, "live", None, with_content=False, out=out, note=note, poll_s=0.25,
                          sleep=sleep) == 0
    text = out.getvalue()
    assert re.search(r"^0 +0\.000 +start ", text, re.M)   # A's step 0, in the session's table
    assert len(re.findall(r"^#0  at ", text, re.M)) == 1   # then B's, under the same index
