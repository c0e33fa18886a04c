"""Prompt fingerprints: equal leading ids exactly as far as two prompts share whole blocks,
per tenant; stored per step and exported as `hash_ids` only when they cover the prompt."""
import json

import pytest

from agents_trace.export import export_lines
from agents_trace.prompt_blocks import RECORD_BLOCK_SIZE, prompt_block_ids
from agents_trace.records import StepResult

from tests.agents_trace.helpers import ManualClock, make_tracer

B = RECORD_BLOCK_SIZE


def test_ids_follow_the_shared_prefix_block_by_block():
    base = list(range(1000, 1000 + 2 * B + 5))           # two full blocks and a partial one
    longer = base + [7] * (B + 1)                         # the same prompt, grown
    forked = base[:B] + [9] + base[B + 1:]               # differs inside the second block
    ids = prompt_block_ids("acme", base)
    assert len(ids) == 3 and len(prompt_block_ids("acme", longer)) == 4
    assert prompt_block_ids("acme", longer)[:2] == ids[:2]
    assert prompt_block_ids("acme", longer)[2] != ids[2]           # the partial block filled up
    assert prompt_block_ids("acme", forked)[0] == ids[0]
    assert prompt_block_ids("acme", forked)[1:] != ids[1:]          # and everything after it
    assert not set(prompt_block_ids("globex", base)) & set(ids)    # tenants never share
    assert prompt_block_ids("acme", base) == ids and all(0 <= i < 2 ** 53 for i in ids)
    assert prompt_block_ids("acme", []) == []


def _export_one_step(tmp_path, prompt_ids, num_input_tokens, **config) -> dict:
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, **config)
    ctx = tracer.begin("acme", {"x-session-id": "s"}, {"model": "m", "messages": [{"role": "user", "content": "x"}]})
    clock.advance(0.5)
    tracer.end(ctx, StepResult(num_input_tokens=num_input_tokens, num_output_tokens=3, finish_reason="stop",
                               output_text="ok", prompt_token_ids=prompt_ids))
    tracer.stop()
    header, line = [json.loads(text) for text in export_lines(tmp_path / "traces.sqlite3", "acme", "s")]
    assert header["block_size"] == B
    return line


def test_a_step_exports_its_prompt_fingerprints(tmp_path):
    prompt = list(range(3 * B - 1))
    assert _export_one_step(tmp_path, prompt, len(prompt))["hash_ids"] == prompt_block_ids("acme", prompt)


@pytest.mark.parametrize("prompt, num_input_tokens, config", [
    (list(range(200)), 200, {"record_prompt_blocks": False}),   # recording off
    (None, 200, {}),                                           # an upstream model: no token ids
    (list(range(200)), 300, {}),                               # ids that do not cover the prompt
])
def test_no_fingerprints_unless_they_cover_the_whole_prompt(tmp_path, prompt, num_input_tokens, config):
    line = _export_one_step(tmp_path, prompt, num_input_tokens, **config)
    assert "hash_ids" not in line and line["input_tokens"] == num_input_tokens
