"""Needs the FI18 gateway/tracing.py + exchange.py diff: an upstream stream its client cut
is traced with the tokens it was charged and counted (docs/api.md, the `n` row)."""
from __future__ import annotations

import json
import time

import httpx
import pytest

TENANT = "beta"


@pytest.mark.parametrize("model", ["fake", "fake-direct"])
def test_a_cut_upstream_streams_step_records_what_it_was_charged(gateway, model):
    from agents_trace.step_queries import list_steps

    session = f"fi18-cut-{model}-{time.monotonic_ns()}"
    limiter, tracer = gateway.state.limiters[TENANT], gateway.state.tracer
    before = limiter.num_spent_tokens
    with httpx.stream("POST", f"{gateway.base_url}/v1/chat/completions", timeout=30,
                      headers={**gateway.headers(TENANT), "x-session-id": session},
                      json={"model": model, "messages": [{"role": "user", "content": "slow"}], "stream": True}) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                break
    deadline_s = time.monotonic() + 15
    while not (steps := list_steps(tracer.store_path, TENANT, session)["data"]):
        assert time.monotonic() < deadline_s, "the cut step was not traced"
        tracer.flush(1)
        time.sleep(0.05)
    (step,) = steps
    charged = limiter.num_spent_tokens - before
    assert step["error"] == "client_closed" and step["num_input_tokens"] > 0
    assert step["num_input_tokens"] + step["num_output_tokens"] == charged, (step, charged)
