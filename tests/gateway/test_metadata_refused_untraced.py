"""Metadata out of range (a value over 512 characters, more than 16 pairs) makes a body no
valid request: refused before anything is kept (gateway/request_metadata.py), so neither
chat completions nor the Responses API trace it as a step or answer it with an
`x-session-id` (docs/tracing.md). QA155 #4: a 600-character `metadata.agent_name` was a
failed step, its refused value (cut to 256) the session's agent."""
from __future__ import annotations

import time

import pytest

from agents_trace.store_queries import find_session
from tests.gateway.test_traced_failures import post, traced_steps, user

LONG_AGENT = "A" * 600
TOO_MANY_PAIRS = {f"k{i}": "v" for i in range(17)}


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"model": "tiny", "messages": user("hi"), "max_tokens": 2}),
    ("/v1/responses", {"model": "tiny", "input": "hi", "max_output_tokens": 2}),
])
def test_a_request_with_metadata_out_of_range_is_refused_untraced(gateway, path, body):
    session = f"metadata-refused-{time.time_ns()}"
    refused = [post(gateway, session, {**body, "metadata": {"agent_name": LONG_AGENT}}, path=path),
               post(gateway, session, {**body, "metadata": TOO_MANY_PAIRS}, path=path)]
    for answer in refused:
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_value"
        assert "x-session-id" not in answer.headers, "the refused request was traced"
    valid = post(gateway, session, {**body, "metadata": {"agent_name": "planner"}}, path=path)
    assert valid.status_code == 200 and valid.headers["x-session-id"] == session
    steps = traced_steps(gateway, session, 1)
    assert [step["error"] for step in steps] == [None], "a refused request was traced"
    (traced,) = find_session(gateway.state.tracer.store_path, session, "alpha")
    assert traced["agent"] == "planner" and traced["num_steps"] == 1 and traced["num_errors"] == 0
