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
