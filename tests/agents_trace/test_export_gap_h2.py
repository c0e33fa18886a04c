"""An export carries each step's `gap_s` (the tool run or think time since the previous
line's response ended), which the replay waits; the first line of a session has none,
and a failed step left out between two lines does not shorten the gap."""
from __future__ import annotations

import io
import json

from agents_trace.export import export_lines, export_sessions_lines, line_gap_s
from agents_trace.records import StepResult
from cache.trace_format import iter_trace
from tests.agents_trace.helpers import ManualClock, make_tracer

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _record(tmp_path, steps):
    """One session "s": for each (reply_s, then_s, result) a step whose reply takes
    reply_s, followed by then_s of tool time."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    for reply_s, then_s, result in steps:
        ctx = tracer.begin("acme", {"x-session-id": "s"}, BODY)
        clock.advance(reply_s)
        tracer.end(ctx, result)
        clock.advance(then_s)
    tracer.stop()
    return tracer.store_path


def _ok(tokens: int) -> StepResult:
    return StepResult(num_input_tokens=tokens, num_output_tokens=2, finish_reason="stop", output_text="ok")


def test_each_later_line_carries_the_gap_after_the_previous_reply_not_the_inter_arrival(tmp_path):
    path = _record(tmp_path, [(0.5, 1.0, _ok(10)), (2.0, 3.0, _ok(11)), (0.25, 0.0, _ok(12))])
    lines = [json.loads(line) for line in export_lines(path, "acme", "s")][1:]
    assert [line["t"] for line in lines] == [0.0, 1.5, 6.5]
    assert ["gap_s" in lines[0], lines[1]["gap_s"], lines[2]["gap_s"]] == [False, 1.0, 3.0]
    merged = "".join(export_sessions_lines(path, [("acme", "s")], "all"))
    _, records = iter_trace(io.StringIO(merged))
    assert [r.gap_s for r in records] == [None, 1.0, 3.0]


def test_a_failed_step_left_out_between_two_lines_counts_in_the_gap(tmp_path):
    refused = StepResult(error="context_length_exceeded", error_message="too long")
    path = _record(tmp_path, [(0.5, 1.0, _ok(10)), (0.5, 2.0, refused), (0.5, 0.0, _ok(11))])
    lines = [json.loads(line) for line in export_lines(path, "acme", "s")][1:]
    assert [line["input_tokens"] for line in lines] == [10, 11]
    assert lines[1]["gap_s"] == 3.5   # 1.0 + the failed step's 0.5 + 2.0, from the first line's reply end


def test_line_gap_s_known_answers():
    previous = {"arrived_s": 10.0, "ended_s": 12.0, "gap_s": None}
    step = {"arrived_s": 15.0, "ended_s": 16.0, "gap_s": 3.0}
    assert line_gap_s(step, None, False) is None                     # a session's first line
    assert line_gap_s(step, previous, False) == 3.0
    assert line_gap_s(dict(step, gap_s=None), previous, False) is None   # not known to the store
    assert line_gap_s(dict(step, gap_s=-0.5), previous, False) == 0.0   # sent before the reply ended
    assert line_gap_s(step, previous, True) == 3.0                      # 15.0 - 12.0
