"""examples/replay_and_compare.sh end to end on the tiny model (two gateway starts)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.gateway.serving import free_port

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "replay_and_compare.sh"


def test_replay_and_compare_prints_both_policies(tmp_path):
    if shutil.which("stepahead") is None or shutil.which("curl") is None:
        pytest.skip("needs the installed `stepahead` command and curl")
    env = dict(os.environ, MODEL="tiny", TENANTS="2", SESSIONS="1", SPEED="50", HOT_BLOCKS="256",
               PORT=str(free_port()), STEPAHEAD_TRACE_DB=str(tmp_path / "t.sqlite"))
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=420, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])["comparison"]
    assert set(rows) == {"predictive", "lru"}
    for row in rows.values():
        assert row["requests"] > 0 and row["errors"] == 0 and row["cached_token_share"] > 0
    assert "LRU / predictive mean TTFT" in done.stdout
    same_share = rows["predictive"]["cached_token_share"] == rows["lru"]["cached_token_share"]
    assert ("their TTFT differs by noise only" in done.stdout) == same_share


def test_replay_and_compare_replays_a_recorded_trace_with_its_own_tenants(tmp_path):
    if shutil.which("stepahead") is None or shutil.which("curl") is None:
        pytest.skip("needs the installed `stepahead` command and curl")
    trace = tmp_path / "recorded.jsonl"
    rows = [{"format": "stepahead-trace/1", "block_size": 64, "time_unit": "s"}]
    for tenant, first_id in (('team "a"', 100), ("b", 200)):   # a name TOML must quote
        for step in range(2):
            rows.append({"t": step * 0.2, "tenant": tenant, "session": f"{tenant}-s", "after": "start" if step == 0
                         else "tool:search", "tool_calls": ["search"] if step == 0 else [],
                         "input_tokens": 64 * (2 + step), "output_tokens": 4,
                         "hash_ids": list(range(first_id, first_id + 2 + step))})
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    env = dict(os.environ, MODEL="tiny", SPEED="10", HOT_BLOCKS="256", TRACE=str(trace),
               PORT=str(free_port()), STEPAHEAD_TRACE_DB=str(tmp_path / "t.sqlite"))
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=420, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    compared = json.loads(done.stdout.strip().splitlines()[-1])["comparison"]
    for row in compared.values():
        assert (row["requests"], row["errors"]) == (4, 0)
        assert row["cached_tokens"] >= 2 * 128   # each session's second step finds its first's blocks
