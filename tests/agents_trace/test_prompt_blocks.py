"""Prompt fingerprints: equal leading ids exactly as far as two prompts share whole blocks,
per tenant; stored per step, exported as `hash_ids` only when they cover the prompt, and
compared step to step to show what the cache lost while a session was away."""
import json

import pytest

from agents_trace.export import export_lines
from agents_trace.prompt_blocks import RECORD_BLOCK_SIZE, prompt_block_ids, shared_prefix_tokens
from agents_trace.records import StepResult
from agents_trace.step_queries import list_steps
from agents_trace.store_stats import StatsWindow, tenant_stats
from gateway.cli import main as cli_main

from tests.agents_trace.helpers import ManualClock, make_tracer, session_with_an_eviction

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
    planner, executor = (prompt_block_ids("acme", longer, model=name) for name in ("planner", "executor"))
    assert not set(planner) & set(executor)   # models never share: each has a prefix cache of its own
    assert shared_prefix_tokens(planner, executor, len(longer)) == 0
    assert prompt_block_ids("acme", forked, model="planner")[0] == planner[0]


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
    assert _export_one_step(tmp_path, prompt, len(prompt))["hash_ids"] == prompt_block_ids("acme", prompt, model="m")


@pytest.mark.parametrize("prompt, num_input_tokens, config", [
    (list(range(200)), 200, {"record_prompt_blocks": False}),   # recording off
    (None, 200, {}),                                           # an upstream model: no token ids
    (list(range(200)), 300, {}),                               # ids that do not cover the prompt
])
def test_no_fingerprints_unless_they_cover_the_whole_prompt(tmp_path, prompt, num_input_tokens, config):
    line = _export_one_step(tmp_path, prompt, num_input_tokens, **config)
    assert "hash_ids" not in line and line["input_tokens"] == num_input_tokens


def test_shared_prefix_counts_whole_equal_leading_blocks():
    first = prompt_block_ids("acme", list(range(200)))          # 3 full blocks and 8 tokens
    grown = prompt_block_ids("acme", list(range(300)))
    assert shared_prefix_tokens(first, grown, 300) == 3 * B
    assert shared_prefix_tokens(first, first, 200) == 3 * B     # the same prompt: all but its last token's block
    exact = prompt_block_ids("acme", list(range(2 * B)))
    assert shared_prefix_tokens(exact, exact, 2 * B) == B
    assert shared_prefix_tokens(prompt_block_ids("globex", list(range(200))), grown, 300) == 0
    assert shared_prefix_tokens(None, grown, 300) is None and shared_prefix_tokens(first, None, 300) is None


def test_the_tracer_says_at_each_steps_end_what_its_previous_prompt_left_it(tmp_path):
    _, said = session_with_an_eviction(tmp_path)
    assert said == [None, 3 * B, 4 * B]   # the same figures the store gives (below)
    _, said = session_with_an_eviction(tmp_path / "off", record_prompt_blocks=False)
    assert said == [None, None, None]


def test_steps_say_how_much_of_their_prompt_the_previous_step_had(tmp_path, capsys):
    store, _ = session_with_an_eviction(tmp_path)
    page = list_steps(store, "acme", "s")
    assert [s["prefix_from_previous_tokens"] for s in page["data"]] == [None, 3 * B, 4 * B]
    assert [s["evicted_prefix_tokens"] for s in page["data"]] == [None, 0, 4 * B]   # what /ui marks red
    assert "prompt_blocks" not in page["data"][0]
    later = list_steps(store, "acme", "s", offset=2, limit=1)   # the step before the page still counts
    assert [(s["index"], s["prefix_from_previous_tokens"]) for s in later["data"]] == [(2, 4 * B)]
    assert cli_main(["traces", "show", "s", "--db", str(store)]) == 0
    out = capsys.readouterr().out
    assert "FROM PREV" in out
    assert out.rstrip().endswith("1 step(s) found fewer tokens cached than the previous step's prompt shared "
                                 "with them (FROM PREV), 256 tokens in all, evicted while the session was "
                                 "away: #2 (256)")
    total = tenant_stats(store, StatsWindow())["total"]   # the same, counted per tenant
    assert (total["prefix_from_previous_tokens"], total["evicted_prefix_tokens"],
            total["steps_with_evicted_prefix"]) == (3 * B + 4 * B, 4 * B, 1)
    assert cli_main(["traces", "stats", "--db", str(store)]) == 0
    assert "256 (57%)" in capsys.readouterr().out   # 256 of the 448 tokens the previous steps left


def test_a_failed_step_is_skipped_as_the_previous_prompt_live_and_in_the_store(tmp_path):
    """A rate-limited step's prompt never reached the cache; its retry is compared with the
    last prompt that did, so retrying is not counted as an eviction (live or stored)."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    said = []
    for prompt_len, cached, error in ((200, 0, None), (300, 0, "rate_limit_exceeded"), (300, 192, None)):
        ctx = tracer.begin("acme", {"x-session-id": "s"}, {"model": "m", "messages": [{"role": "user", "content": "x"}]})
        clock.advance(0.5)
        said.append(tracer.end(ctx, StepResult(num_input_tokens=prompt_len, num_cached_tokens=cached, error=error,
                                               prompt_token_ids=list(range(prompt_len)))))
    tracer.stop()
    store = tmp_path / "traces.sqlite3"
    assert said == [None, None, 3 * B]
    steps = list_steps(store, "acme", "s")["data"]
    assert [s["prefix_from_previous_tokens"] for s in steps] == [None, 3 * B, 3 * B]
    assert [s["evicted_prefix_tokens"] for s in steps] == [None, None, 0]   # the failed step lost nothing
    assert list_steps(store, "acme", "s", offset=2)["data"][0]["prefix_from_previous_tokens"] == 3 * B
    total = tenant_stats(store, StatsWindow())["total"]
    assert (total["prefix_from_previous_tokens"], total["evicted_prefix_tokens"]) == (3 * B, 0)


def test_a_window_that_starts_mid_session_compares_its_first_step_with_the_step_before_it(tmp_path):
    store, _ = session_with_an_eviction(tmp_path)
    last = list_steps(store, "acme", "s")["data"][2]
    window = tenant_stats(store, StatsWindow(since_s=last["arrived_s"]))["total"]
    assert window["steps"] == 1
    assert (window["prefix_from_previous_tokens"], window["evicted_prefix_tokens"],
            window["steps_with_evicted_prefix"]) == (4 * B, 4 * B, 1)   # as in the whole session's figures
