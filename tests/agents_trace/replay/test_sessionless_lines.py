"""Lines with neither a session nor `hash_ids` share nothing, in the replay as in the
simulator: six such lines at one time (a hand-made trace with coarse times, or Mooncake-
shaped lines without hash ids) are six prompts with no common first block, which the
simulator, reading the same trace, gives no hit either."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cache.sim.cli import main as sim_main

BLOCK_SIZE = 16


def _trace(tmp_path):
    path = tmp_path / "same_t.jsonl"
    lines = [{"format": "stepahead-trace/1", "block_size": BLOCK_SIZE, "time_unit": "s"}]
    lines += [{"t": 0, "tenant": "acme", "input_tokens": 320, "output_tokens": 4}] * 6
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture
def fake_gateway():
    from tests.agents_trace.replay.fake_gateway import start_fake_gateway

    gateway = start_fake_gateway()
    yield gateway
    gateway.stop()


def test_sessionless_lines_at_one_time_are_replayed_as_prompts_that_share_no_block(tmp_path, fake_gateway, capsys):
    trace = _trace(tmp_path)
    done = subprocess.run([sys.executable, "-m", "agents_trace.replay", str(trace), "--base-url",
                           fake_gateway.base_url, "--api-key", "k", "--model", "m", "--no-progress", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    prompts = [body["prompt"] for body in fake_gateway.bodies]
    assert len(prompts) == 6 and all(len(prompt) == 320 for prompt in prompts)
    first_blocks = {tuple(prompt[:BLOCK_SIZE]) for prompt in prompts}
    assert len(first_blocks) == 6   # no two share even their first block: no cache hit to be had

    assert sim_main(["--trace", str(trace), "--hot-blocks", "1000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["block_hit_rate"] == 0.0   # the simulator agrees
