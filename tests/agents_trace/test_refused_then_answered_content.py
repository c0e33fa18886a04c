"""A refused step keeps at most 64 Ki characters of its request, so no later step's content
extends it (QA181 F1): the usual "429, then the SDK retries the same body" stores the
answered retry's request whole (step-content query and export alike); a retry after a
refused continuation extends the answered step before it; and where the two overlapped
(the retry began before the refused one ended), the store keeps whichever ended second
from pointing at cut content."""
from __future__ import annotations

import json

from agents_trace.export import export_lines
from agents_trace.records import StepResult
from agents_trace.step_queries import step_content
from agents_trace.content_rows import TRUNCATED_ROLE

from tests.agents_trace.helpers import ManualClock, make_tracer

OK = StepResult(num_input_tokens=10, num_output_tokens=1, worker="w0", ttft_s=0.1, finish_reason="stop",
                output_text="ok")
REFUSED = StepResult(error="rate_limit_exceeded", error_message="slow down")
SYSTEM = {"role": "system", "content": "be brief"}
HUGE = {"role": "user", "content": "line of a long document\n" * 80_000}   # about 2 MB


def _begin(tracer, messages: list):
    return tracer.begin("acme", {"x-session-id": "S1"}, {"model": "tiny", "messages": list(messages)})


def _messages_of(path, index: int) -> list:
    """The whole request of step `index`, rebuilt from its content and the step it extends."""
    content = step_content(path, "acme", "S1", index)
    if content["num_prefix_messages"] == 0:
        return content["new_messages"]
    return _messages_of(path, content["prefix_step"])[:content["num_prefix_messages"]] + content["new_messages"]


def _export_messages(path) -> list[list]:
    lines = [json.loads(line) for line in export_lines(path, "acme", "S1")][1:]
    return [line.get("messages") for line in lines]


def _run(tmp_path, script) -> object:
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    try:
        script(tracer, clock)
        assert tracer.flush(5.0)
    finally:
        tracer.stop()
    return tmp_path / "traces.sqlite3"


def test_the_answered_retry_of_a_refused_huge_request_keeps_its_request_whole(tmp_path):
    def script(tracer, clock):
        for result in (REFUSED, OK):
            ctx = _begin(tracer, [SYSTEM, HUGE])
            clock.advance(1.0)
            tracer.end(ctx, result)

    path = _run(tmp_path, script)
    refused = step_content(path, "acme", "S1", 0)["new_messages"]
    assert refused[-1]["role"] == TRUNCATED_ROLE   # the refused one is still cut
    answered = step_content(path, "acme", "S1", 1)
    assert answered["num_prefix_messages"] == 0 and answered["prefix_step"] is None
    assert answered["new_messages"] == [SYSTEM, HUGE]
    assert _export_messages(path) == [[SYSTEM, HUGE]]   # the refused step is left out; the answered one whole


def test_a_retry_after_a_refused_continuation_extends_the_answered_step_before_it(tmp_path):
    first = [SYSTEM, {"role": "user", "content": "read this"}]
    then = [*first, {"role": "assistant", "content": "ok"}, HUGE]

    def script(tracer, clock):
        for messages, result in ((first, OK), (then, REFUSED), (then, REFUSED), (then, OK)):
            ctx = _begin(tracer, messages)
            clock.advance(1.0)
            tracer.end(ctx, result)

    path = _run(tmp_path, script)
    answered = step_content(path, "acme", "S1", 3)
    assert (answered["num_prefix_messages"], answered["prefix_step"]) == (2, 0)
    assert answered["new_messages"] == then[2:]
    assert _messages_of(path, 3) == then
    assert _export_messages(path) == [first, then]


def test_a_retry_that_ended_after_the_overlapping_refused_step_keeps_its_request_whole(tmp_path):
    """The retry began while the refused step was in flight (its base then) and ended after it."""
    def script(tracer, clock):
        refused = _begin(tracer, [SYSTEM, HUGE])
        retry = _begin(tracer, [SYSTEM, HUGE])
        clock.advance(1.0)
        tracer.end(refused, REFUSED)
        assert tracer.flush(5.0)   # stored, cut, before the retry is written
        clock.advance(1.0)
        tracer.end(retry, OK)

    path = _run(tmp_path, script)
    assert step_content(path, "acme", "S1", 0)["new_messages"][-1]["role"] == TRUNCATED_ROLE
    answered = step_content(path, "acme", "S1", 1)
    assert answered["prefix_step"] is None and answered["new_messages"] == [SYSTEM, HUGE]
    assert _export_messages(path) == [[SYSTEM, HUGE]]


def test_a_refused_step_a_stored_later_step_extends_already_keeps_its_request_whole(tmp_path):
    """The retry began while the refused step was in flight and ended (was stored) first."""
    def script(tracer, clock):
        refused = _begin(tracer, [SYSTEM, HUGE])
        retry = _begin(tracer, [SYSTEM, HUGE])
        clock.advance(1.0)
        tracer.end(retry, OK)
        assert tracer.flush(5.0)
        clock.advance(1.0)
        tracer.end(refused, REFUSED)

    path = _run(tmp_path, script)
    assert step_content(path, "acme", "S1", 1)["prefix_step"] == 0
    assert step_content(path, "acme", "S1", 0)["new_messages"] == [SYSTEM, HUGE]
    assert _messages_of(path, 1) == [SYSTEM, HUGE]
    assert _export_messages(path) == [[SYSTEM, HUGE]]   # the kept step's line rebuilt through the left-out one
