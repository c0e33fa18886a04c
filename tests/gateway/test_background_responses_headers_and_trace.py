"""A background Responses POST, answered `queued` or streamed, names its traced step and
session as a foreground answer does: `x-request-id` is the response's id, `x-session-id`
the session (QA137 #3); and a background run that failed keeps in its traced step the
output it made before, as its stored response does (QA137 #6)."""
from __future__ import annotations

import json
import time

import httpx

from agents_trace.step_queries import step_content
from tests.gateway.test_background_responses import FINAL
from tests.gateway.test_traced_failures import traced_steps


def headers(gateway, session: str) -> dict:
    return {**gateway.headers("alpha"), "x-session-id": session}


def ended(gateway, response_id: str) -> dict:
    deadline_s = time.monotonic() + 60
    while (response := httpx.get(f"{gateway.base_url}/v1/responses/{response_id}", timeout=30,
                                 headers=gateway.headers("alpha")).json())["status"] not in FINAL:
        assert time.monotonic() < deadline_s, response["status"]
        time.sleep(0.05)
    return response


def test_background_answers_name_their_step_and_session(gateway):
    session = f"bg-headers-{time.time_ns()}"
    request = {"model": "tiny", "input": "Say hi.", "max_output_tokens": 2, "background": True}
    queued = httpx.post(f"{gateway.base_url}/v1/responses", json=request, timeout=60, headers=headers(gateway, session))
    assert queued.status_code == 200, queued.text
    assert queued.headers["x-request-id"] == queued.json()["id"]
    assert queued.headers.get("x-session-id") == session
    with httpx.stream("POST", f"{gateway.base_url}/v1/responses", json={**request, "stream": True}, timeout=60,
                      headers=headers(gateway, session)) as streamed:
        assert streamed.status_code == 200
        events = [json.loads(line[6:]) for line in streamed.iter_lines() if line.startswith("data: ")]
    streamed_id = events[0]["response"]["id"]
    assert streamed.headers["x-request-id"] == streamed_id
    assert streamed.headers.get("x-session-id") == session
    steps = traced_steps(gateway, session, 2)
    assert sorted(step["request_id"] for step in steps) == sorted([queued.json()["id"], streamed_id])


def test_a_failed_background_run_keeps_its_output_so_far_in_its_trace(gateway, monkeypatch):
    monkeypatch.setattr(gateway.state.tracer, "captures_content", True)
    session = f"bg-failed-{time.time_ns()}"
    with httpx.stream("POST", f"{gateway.base_url}/v1/responses", timeout=60, headers=headers(gateway, session),
                      json={"model": "fake", "input": "midstream-error", "background": True, "stream": True}) as started:
        assert started.status_code == 200
        events = [json.loads(line[6:]) for line in started.iter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] == "response.failed"   # the fake upstream breaks its stream after one word
    stored = ended(gateway, events[0]["response"]["id"])
    assert stored["status"] == "failed"
    stored_text = "".join(part["text"] for item in stored["output"] for part in item.get("content", []))
    assert stored_text.strip() == "echo:"   # the fake upstream's first word, before the stream broke
    step, = traced_steps(gateway, session, 1)
    assert step["error"] is not None
    traced = step_content(gateway.state.tracer.store_path, "alpha", session, 0)
    assert traced["output"] is not None, "the failed run's output is not in its trace"
    assert traced["output"]["content"] == stored_text
