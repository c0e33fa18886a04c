"""A session's totals count the steps a model ran: a refused prompt keeps its size in its
own step row only (FI21, QA97 finding 5)."""
from __future__ import annotations

from agents_trace.records import StepResult
from agents_trace.store_queries import find_session
from agents_trace.step_queries import list_steps

from tests.agents_trace.helpers import ManualClock, make_tracer

BODY = {"model": "tiny", "messages": [{"role": "user", "content": "word " * 50}]}


def test_session_totals_leave_out_a_refused_prompt(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    for session, results in (("mixed", (StepResult(num_input_tokens=100, num_cached_tokens=80, num_output_tokens=5,
                                                   worker="w0", ttft_s=0.1, finish_reason="stop", output_text="ok"),
                                        StepResult(num_input_tokens=25_000, error="context_length_exceeded"),
                                        StepResult(num_input_tokens=60, worker="w0", error="client_closed"))),
                             ("refused", (StepResult(num_input_tokens=31, error="context_length_exceeded"),))):
        for result in results:
            ctx = tracer.begin("acme", {"x-session-id": session}, BODY)
            clock.advance(0.5)
            tracer.end(ctx, result)
    tracer.stop()
    path = tmp_path / "traces.sqlite3"
    [mixed] = find_session(path, "mixed", "acme")
    assert (mixed["num_steps"], mixed["num_errors"]) == (3, 2)
    assert (mixed["num_input_tokens"], mixed["num_cached_tokens"], mixed["num_output_tokens"]) == (160, 80, 5)
    [refused] = find_session(path, "refused", "acme")
    assert (refused["num_steps"], refused["num_input_tokens"]) == (1, 0)
    # the refused step still shows its prompt's size
    assert [s["num_input_tokens"] for s in list_steps(path, "acme", "mixed")["data"]] == [100, 25_000, 60]
