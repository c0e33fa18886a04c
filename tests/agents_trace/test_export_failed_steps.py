"""A step refused or failed before generating anything is left out of a stepahead-trace/1
export (the format has no error field: as an ordinary line a replay would send it as a
request that succeeds), and the CLI says how many on stderr; one cut short part-way is kept."""
from __future__ import annotations

import json

import pytest

from agents_trace.records import StepResult
from tests.agents_trace.helpers import ManualClock, make_tracer
from tests.agents_trace.test_traces_command import _run

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def store(tmp_path):
    """Session "mixed": ok, refused (context_length_exceeded), refused after its prompt was
    counted (insufficient_quota), cut short after 4 tokens (client_closed), ok."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    for result in (StepResult(num_input_tokens=20, num_output_tokens=3),
                   StepResult(error="context_length_exceeded", error_message="too long"),
                   StepResult(num_input_tokens=30, error="insufficient_quota"),
                   StepResult(num_input_tokens=25, num_output_tokens=4, ttft_s=0.1, error="client_closed"),
                   StepResult(num_input_tokens=40, num_output_tokens=2)):
        ctx = tracer.begin("acme", {"x-session-id": "mixed"}, BODY)
        clock.advance(0.5)
        tracer.end(ctx, result)
        clock.advance(1.0)
    tracer.stop()
    return tmp_path / "traces.sqlite3"


@pytest.mark.parametrize("which", [["--session", "mixed"], ["--all"]], ids=["session", "all"])
def test_export_leaves_out_the_steps_that_failed_without_output_and_says_how_many(store, capsys, which):
    assert _run(["traces", "export", *which, "--db", str(store)]) == 0
    out, err = capsys.readouterr()
    requests = [json.loads(line) for line in out.splitlines()[1:]]
    assert [(r["input_tokens"], r["output_tokens"]) for r in requests] == [(20, 3), (25, 4), (40, 2)]
    assert [r["t"] for r in requests] == [0.0, 4.5, 6.0]
    assert "stepahead: 2 failed step(s) left out" in err
