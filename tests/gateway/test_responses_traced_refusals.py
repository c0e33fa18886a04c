"""A valid Responses request refused before it was prepared is a failed step of its agent
session, as the same refusal on chat completions is (docs/tracing.md): an unknown model,
an unknown `previous_response_id` (traced with its input alone: no history was read), its
answer carrying the step's `x-request-id` and the session's `x-session-id` (QA137 #4). A
body that is no valid request stays untraced."""
from __future__ import annotations

import time

import httpx

from agents_trace.step_queries import step_content
from tests.gateway.test_traced_failures import traced_steps


def create(gateway, session: str, body: dict) -> httpx.Response:
    return httpx.post(f"{gateway.base_url}/v1/responses", json=body, timeout=60,
                      headers={**gateway.headers("alpha"), "x-session-id": session})


def test_a_responses_request_refused_for_its_model_or_previous_response_is_a_failed_step(gateway, monkeypatch):
    monkeypatch.setattr(gateway.state.tracer, "captures_content", True)
    session = f"resp-refused-{time.time_ns()}"
    refused = [create(gateway, session, {"model": "nope", "input": "which model?"}),
               create(gateway, session, {"model": "tiny", "input": "continue it",
                                         "previous_response_id": "resp_not_there"})]
    assert [answer.status_code for answer in refused] == [404, 404]
    not_valid = create(gateway, session, {"model": "tiny", "input": "x", "max_output_tokens": -1})
    assert not_valid.status_code == 400 and "x-session-id" not in not_valid.headers
    steps = traced_steps(gateway, session, 2)
    assert len(steps) == 2, "the invalid body was traced"
    for answer, step in zip(refused, steps):
        error = answer.json()["error"]
        assert answer.headers["x-session-id"] == session
        assert answer.headers["x-request-id"] == step["request_id"] and step["request_id"].startswith("resp_")
        assert (step["error"], step["error_message"]) == (error["code"] or error["type"], error["message"])
        assert step["num_input_tokens"] == 0 and step["num_output_tokens"] == 0
    assert [step["error"] for step in steps] == ["model_not_found", "previous_response_not_found"]
    traced = step_content(gateway.state.tracer.store_path, "alpha", session, 1)   # its input alone
    assert [message["content"] for message in traced["new_messages"]] == ["continue it"]
    assert traced["output"] is None
