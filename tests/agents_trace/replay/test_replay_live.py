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
