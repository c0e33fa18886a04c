"""The replay harness against a real gateway on the tiny model."""
from __future__ import annotations

import json
import subprocess
import sys

from agents_trace.workload.generator import WorkloadConfig, generate_workload
from agents_trace.workload.tool_patterns import packaged_patterns
from cache.trace_format import TraceHeader, write_trace
from tests.conftest import TINY_GATEWAY_KEYS


def test_replay_generated_workload_reports_hits_per_tenant(tiny_gateway, tmp_path):
    config = WorkloadConfig(num_tenants=2, num_sessions=2, seed=7, system_prompt_tokens=(200, 300),
                            tool_median_s_range=(0.5, 2.0), think_time_median_s=1.0,
                            session_rate_per_s=4.0)
    records = [r for r in generate_workload(config, packaged_patterns())][:14]
    path = tmp_path / "w.jsonl"
    with open(path, "w") as stream:
        write_trace(stream, records, TraceHeader(block_size=16))
    keys = [f"--tenant-key={t}={k}" for t, k in TINY_GATEWAY_KEYS.items()]
    done = subprocess.run(
        [sys.executable, "-m", "agents_trace.replay", str(path), "--base-url", tiny_gateway.base_url,
         "--api-key", TINY_GATEWAY_KEYS["tenant0"], *keys, "--speed", "20", "--max-output-tokens", "4",
         "--json"], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["total"]["requests"] == len(records) and report["total"]["errors"] == 0
    assert set(report["per_tenant"]) == {r.tenant for r in records}
    assert report["total"]["cached_token_share"] > 0.3  # sessions and tenants share prefixes
    assert report["total"]["ttft_p50_s"] > 0


def test_replay_bad_key_is_reported_as_errors(tiny_gateway, tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_text('{"t": 0, "input_tokens": 20, "output_tokens": 2, "tenant": "x", "session": "s"}\n')
    done = subprocess.run(
        [sys.executable, "-m", "agents_trace.replay", str(path), "--base-url", tiny_gateway.base_url,
         "--api-key", "sk-wrong", "--model", "tiny", "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["total"]["errors"] == 1 and "401" in report["error_samples"][0]


def test_replay_without_a_reachable_gateway_or_a_listed_model_says_so(tiny_gateway, tmp_path):
    from tests.gateway.serving import free_port

    path = tmp_path / "one.jsonl"
    path.write_text('{"t": 0, "input_tokens": 20, "output_tokens": 2, "tenant": "x", "session": "s"}\n')
    for base_url, key in ((f"http://127.0.0.1:{free_port()}", "sk-any"), (tiny_gateway.base_url, "sk-wrong")):
        done = subprocess.run([sys.executable, "-m", "agents_trace.replay", str(path), "--base-url", base_url,
                               "--api-key", key, "--json"], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr[-2000:]
        assert f"error: cannot list the models of {base_url}" in done.stderr
        assert "Traceback" not in done.stderr


def test_replayed_tool_steps_reach_the_gateways_traces(tiny_gateway, tmp_path):
    """A token-id replay cannot show tool results or calls; its step hints let the
    gateway trace (and forecast from) the recorded tool steps: a session exported back
    from the gateway has the trace's own `after` and `tool_calls`."""
    import dataclasses
    import time

    import httpx

    config = WorkloadConfig(num_tenants=1, num_sessions=2, seed=11, system_prompt_tokens=(100, 150),
                            tool_median_s_range=(0.2, 0.5), think_time_median_s=0.5, session_rate_per_s=4.0)
    records = [dataclasses.replace(r, session="hinted-replay") for r in generate_workload(config, packaged_patterns())
               if r.session == "tenant0-s0"][:6]  # a session no other test of the shared gateway uses
    assert any(r.tool_calls for r in records) and any((r.after or "").startswith("tool:") for r in records)
    path = tmp_path / "tools.jsonl"
    with open(path, "w") as stream:
        write_trace(stream, records, TraceHeader(block_size=16))
    done = subprocess.run(
        [sys.executable, "-m", "agents_trace.replay", str(path), "--base-url", tiny_gateway.base_url,
         "--api-key", TINY_GATEWAY_KEYS["tenant0"], "--speed", "10", "--max-output-tokens", "2", "--json"],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    headers = {"Authorization": f"Bearer {TINY_GATEWAY_KEYS['tenant0']}"}
    url = f"{tiny_gateway.base_url}/v1/traces/sessions/hinted-replay/export"
    deadline = time.monotonic() + 30
    while True:  # the trace writer stores steps in the background
        reply = httpx.get(url, headers=headers, timeout=10)
        lines = [json.loads(line) for line in reply.text.splitlines()] if reply.status_code == 200 else []
        steps = [line for line in lines if "input_tokens" in line]
        if len(steps) == len(records) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(steps) == len(records), reply.text[-1000:]
    assert [s.get("tool_calls", []) for s in steps] == [r.tool_calls for r in records]
    assert [s.get("after") for s in steps[1:]] == [r.after for r in records[1:]]


def test_ctrl_c_stops_a_replay_and_reports_the_requests_that_ended(tiny_gateway, tmp_path):
    """SIGINT while a session waits out a long tool gap: the replay stops at once (not
    after the gap), prints the report of the step that ended, says what was left out,
    and exits 130 without a traceback."""
    import signal
    import time
    import uuid

    import httpx

    session = f"interrupted-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "gap.jsonl"
    path.write_text("".join(
        json.dumps({"t": t, "input_tokens": 40, "output_tokens": 2, "tenant": "tenant0", "session": session}) + "\n"
        for t in (0, 600)))  # the second step would wait ten minutes
    replay = subprocess.Popen(
        [sys.executable, "-m", "agents_trace.replay", str(path), "--base-url", tiny_gateway.base_url,
         "--api-key", TINY_GATEWAY_KEYS["tenant0"], "--model", "tiny", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"{tiny_gateway.base_url}/v1/traces/sessions/{session}/export"
        headers = {"Authorization": f"Bearer {TINY_GATEWAY_KEYS['tenant0']}"}
        deadline = time.monotonic() + 120
        while httpx.get(url, headers=headers, timeout=10).status_code != 200:  # the first step ended
            assert time.monotonic() < deadline and replay.poll() is None, replay.poll()
            time.sleep(0.2)
        sent = time.monotonic()
        replay.send_signal(signal.SIGINT)
        stdout, stderr = replay.communicate(timeout=30)
    finally:
        replay.kill()
    assert time.monotonic() - sent < 30
    assert replay.returncode == 130, stderr[-2000:]
    assert "stopped after 1 of 2 requests" in stderr and "Traceback" not in stderr, stderr[-2000:]
    report = json.loads(stdout.strip().splitlines()[-1])
    assert report["total"]["requests"] == 1 and report["total"]["errors"] == 0
    assert report["interrupted"] == {"requests_left_out": 1}


def test_a_session_suffix_keeps_a_second_replay_of_a_trace_apart_from_the_first(tiny_gateway, tmp_path):
    """Without it, a trace replayed again into the same store adds its steps to the sessions
    the first replay made (each request carries the recorded id); with it, each replay's
    sessions are their own."""
    import time
    import uuid

    import httpx

    session = f"twice-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "twice.jsonl"
    path.write_text("".join(
        json.dumps({"t": t, "input_tokens": 40, "output_tokens": 2, "tenant": "tenant0", "session": session}) + "\n"
        for t in (0, 0.1)))
    for suffix in ([], ["--session-suffix=-again"]):
        done = subprocess.run(
            [sys.executable, "-m", "agents_trace.replay", str(path), "--base-url", tiny_gateway.base_url,
             "--api-key", TINY_GATEWAY_KEYS["tenant0"], "--model", "tiny", "--json", *suffix],
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    headers = {"Authorization": f"Bearer {TINY_GATEWAY_KEYS['tenant0']}"}

    def num_steps(name: str) -> int:
        reply = httpx.get(f"{tiny_gateway.base_url}/v1/traces/sessions/{name}", headers=headers, timeout=10)
        return reply.json()["session"]["num_steps"] if reply.status_code == 200 else 0

    deadline = time.monotonic() + 30   # the trace writer stores steps in the background
    while (num_steps(session), num_steps(session + "-again")) != (2, 2):
        assert time.monotonic() < deadline, (num_steps(session), num_steps(session + "-again"))
        time.sleep(0.2)
