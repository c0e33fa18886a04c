"""A session of many steps, each with a request id the test knows, for paging tests."""
from __future__ import annotations

from agents_trace.records import StepResult
from agents_trace.tracer import AgentTracer

from tests.agents_trace.helpers import ManualClock


def add_user_turns(tracer: AgentTracer, clock: ManualClock, num_steps: int, session: str = "long",
                   tenant: str = "acme") -> list[str]:
    """`num_steps` steps of session `session`, each a user turn with a request id of its own
    (`chatcmpl-<session>-<index>`, as a reply's x-request-id); returns those ids in order."""
    request_ids = []
    messages = [{"role": "user", "content": "question 0"}]
    for index in range(num_steps):
        request_id = f"chatcmpl-{session}-{index}"
        ctx = tracer.begin(tenant, {"x-session-id": session}, {"model": "tiny", "messages": list(messages)},
                           request_id=request_id)
        clock.advance(0.2)
        tracer.end(ctx, StepResult(num_input_tokens=10 * (index + 1), num_output_tokens=1, ttft_s=0.05,
                                   worker="w0", finish_reason="stop", output_text="ok", response_id=request_id))
        clock.advance(1.0)
        messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": f"question {index + 1}"}]
        request_ids.append(request_id)
    assert tracer.flush(5.0)
    return request_ids
