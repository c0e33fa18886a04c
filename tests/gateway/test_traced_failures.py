"""Failed chat/completions requests in the traces: every traced failure records the message
its client was sent (at most MAX_ERROR_MESSAGE_CHARS of it), and a request refused once its
body was a valid request, before it was prepared (an unknown model, its checks, its prompt
over the context), is a failed step of its session, answered with the session's
`x-session-id` and the step's `x-request-id`. A body that is no valid request stays
untraced."""
from __future__ import annotations

import json
import re
import time

import httpx

from agents_trace.step_queries import list_steps
from gateway.tracing import MAX_ERROR_MESSAGE_CHARS


def post(gateway, session: str, body: dict, path: str = "/v1/chat/completions") -> httpx.Response:
    return httpx.post(f"{gateway.base_url}{path}", json=body, timeout=60,
                      headers={**gateway.headers("alpha"), "x-session-id": session})


def traced_steps(gateway, session: str, count: int) -> list[dict]:
    tracer = gateway.state.tracer
    deadline_s = time.monotonic() + 15
    while len(steps := list_steps(tracer.store_path, "alpha", session)["data"]) < count:
        assert time.monotonic() < deadline_s, f"{len(steps)} of {count} steps traced"
        tracer.flush(1)
        time.sleep(0.05)
    return steps


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_a_failed_upstream_call_is_traced_with_the_message_its_client_got(gateway):
    session = f"upstream-failed-{time.time_ns()}"
    whole = post(gateway, session, {"model": "fake", "messages": user("status:503")})
    assert whole.status_code >= 500
    whole_error = whole.json()["error"]
    with httpx.stream("POST", f"{gateway.base_url}/v1/chat/completions", timeout=60,
                      json={"model": "fake", "messages": user("midstream-error"), "stream": True},
                      headers={**gateway.headers("alpha"), "x-session-id": session}) as streamed:
        assert streamed.status_code == 200
        events = [json.loads(line[6:]) for line in streamed.iter_lines() if line.startswith("data: {")]
    stream_error = next(event["error"] for event in events if "error" in event)
    first, second = traced_steps(gateway, session, 2)
    assert first["request_id"] == whole.headers["x-request-id"]
    assert (first["error"], first["error_message"]) == (whole_error["code"] or whole_error["type"],
                                                        whole_error["message"])
    assert (second["error"], second["error_message"]) == (stream_error["code"] or stream_error["type"],
                                                          stream_error["message"])


def test_a_valid_request_refused_before_it_was_prepared_is_a_failed_step_of_its_session(gateway):
    session = f"refused-{time.time_ns()}"
    assert post(gateway, session, {"model": "tiny", "messages": user("short"), "max_tokens": 2}).status_code == 200
    refused = [
        post(gateway, session, {"model": "tiny", "messages": user("x" * 9000), "max_tokens": 2}),   # context
        post(gateway, session, {"model": "nope", "messages": user("x")}),
        post(gateway, session, {"model": "tiny", "messages": user("x"), "tool_choice": "required"}),   # no tools
        post(gateway, session, {"model": "tiny", "prompt": [65] * 8200}, path="/v1/completions"),
    ]
    assert [answer.status_code for answer in refused] == [400, 404, 400, 400]
    not_valid = post(gateway, session, {"model": "tiny", "messages": user("x"), "max_tokens": -1})
    assert not_valid.status_code == 400 and "x-session-id" not in not_valid.headers
    assert post(gateway, session, {"model": "tiny", "messages": user("short"), "max_tokens": 2}).status_code == 200
    steps = traced_steps(gateway, session, 6)
    assert len(steps) == 6, "the invalid body was traced"
    assert steps[0]["error"] is None and steps[5]["error"] is None
    for answer, step in zip(refused, steps[1:5]):
        error = answer.json()["error"]
        assert answer.headers["x-session-id"] == session
        assert answer.headers["x-request-id"] == step["request_id"]
        assert (step["error"], step["error_message"]) == (error["code"] or error["type"], error["message"])
        # a prompt over the context was counted before its refusal: the step keeps that size (QA80)
        counted = re.search(r"\((\d+) in the (?:messages|prompt)", error["message"])
        assert step["num_input_tokens"] == (int(counted[1]) if counted else 0) and step["num_output_tokens"] == 0
    assert steps[1]["num_input_tokens"] > 8192 and steps[4]["num_input_tokens"] == 8200
    assert [step["error"] for step in steps[1:5]] == ["context_length_exceeded", "model_not_found",
                                                      "invalid_request", "context_length_exceeded"]


def test_a_traced_error_message_is_bounded(gateway):
    session = f"long-message-{time.time_ns()}"
    answer = post(gateway, session, {"model": "m" * 1000, "messages": user("x")})
    message = answer.json()["error"]["message"]
    assert answer.status_code == 404 and len(message) > MAX_ERROR_MESSAGE_CHARS
    (step,) = traced_steps(gateway, session, 1)
    assert step["error_message"] == message[:MAX_ERROR_MESSAGE_CHARS - 1] + "…"


def test_a_responses_request_refused_as_the_chat_request_it_runs_as_is_a_failed_step(gateway):
    """F4's note: a Responses request over the context (or failing the chat checks) was
    answered untraced; it is a failed step of its session, under its response id."""
    session = f"responses-refused-{time.time_ns()}"
    assert post(gateway, session, {"model": "tiny", "input": "short", "max_output_tokens": 2},
                path="/v1/responses").status_code == 200
    refused = post(gateway, session, {"model": "tiny", "input": "x" * 9000, "max_output_tokens": 2},
                   path="/v1/responses")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded"
    assert refused.headers["x-session-id"] == session and refused.headers["x-request-id"].startswith("resp_")
    first, second = traced_steps(gateway, session, 2)
    assert first["error"] is None and second["request_id"] == refused.headers["x-request-id"]
    assert (second["error"], second["error_message"]) == ("context_length_exceeded",
                                                          refused.json()["error"]["message"])
