"""The workload generator's bounds: every knob has a range, the whole workload a size cap,
and neither a huge nor a non-finite value can grow memory or end in a traceback."""
from __future__ import annotations

import io
import json
import math

import pytest

from agents_trace.workload.generator import WorkloadConfig, _Blocks, generate_workload
from agents_trace.workload.limits import MAX_SIGMA, MAX_TOKENS, WorkloadLimits
from cache.trace_format import iter_trace
from gateway.cli import main

PATTERNS_CHAIN = {"START": {"USER": 1}, "USER": {"ls": 1}, "ls": {"cat": 1}, "cat": {"ASSISTANT_TEXT": 1},
                  "ASSISTANT_TEXT": {"END": 1}}


def _patterns():
    from agents_trace.workload.tool_patterns import ToolPatterns

    return [ToolPatterns("d", PATTERNS_CHAIN)]


@pytest.mark.parametrize("knobs, message", [
    ({"batch_lines_per_s": 1e9}, "--batch-lines-per-s must be at most 1,000,000"),
    ({"batch_lines_per_s": math.inf}, "--batch-lines-per-s must be at most 1,000,000"),
    ({"batch_lines_per_s": math.nan}, "--batch-lines-per-s must be a number, 0 or more, not nan"),
    ({"tool_result_tokens_median": 1e12}, "--tool-result-tokens-median must be at most 10,000,000 tokens"),
    ({"tool_result_tokens_median": math.inf}, "--tool-result-tokens-median must be at most 10,000,000 tokens"),
    ({"tool_result_tokens_sigma": math.inf}, f"--tool-result-tokens-sigma must be at most {MAX_SIGMA:g}"),
    ({"think_time_sigma": 1e308}, f"--think-time-sigma must be at most {MAX_SIGMA:g}"),
    ({"tool_sigma": math.inf}, f"--tool-sigma must be at most {MAX_SIGMA:g}"),
    ({"think_time_median_s": math.inf}, "--think-time-median-s must be at most 1,000,000 s"),
    ({"session_rate_per_s": math.inf}, "--session-rate-per-s must be at most 1,000,000"),
    ({"session_rate_per_s": 1e-300}, "--session-rate-per-s must be at least 1e-06"),
    ({"tool_median_s_range": (1.0, math.inf)}, "--tool-median-s-range takes LOW HIGH with 0 < LOW <= HIGH <= "
                                               "1,000,000 s"),
    ({"tool_median_s_range": (math.nan, 3.0)}, "--tool-median-s-range takes LOW HIGH"),
    ({"user_turn_tokens": (1, 10**12)}, "--user-turn-tokens takes LOW HIGH with 0 < LOW <= HIGH <= 10,000,000"),
    ({"system_prompt_tokens": (1, 10**12)}, "--system-prompt-tokens takes LOW HIGH"),
    ({"tool_call_output_tokens": (1, 10**12)}, "--tool-call-output-tokens takes LOW HIGH"),
    ({"text_answer_output_tokens": (1, 10**12)}, "--text-answer-output-tokens takes LOW HIGH"),
    ({"max_context_tokens": MAX_TOKENS + 1}, "--max-context-tokens must be at most 10,000,000 tokens"),
    ({"block_size": 10**12}, "--block-size must be at most 10,000,000 tokens"),
    ({"tool_schema_tokens_per_tool": 10**12}, "--tool-schema-tokens-per-tool must be at most 10,000,000"),
    ({"batch_prompt_tokens": 10**12}, "--batch-prompt-tokens must be at most 10,000,000"),
    ({"batch_output_tokens": 10**12}, "--batch-output-tokens must be at most 10,000,000"),
    ({"num_tenants": 10**6, "num_sessions": 10**6}, "--tenants times --sessions must be at most 1,000,000"),
    ({"seed": -7}, "--seed must be 0 or more, not -7"),   # Python's random would draw seed 7's (QA202 F3)
    ({"tool_seed": -1}, "--tool-seed must be 0 or more, not -1"),
])
def test_workload_config_refuses_knobs_past_their_range_naming_the_flag(knobs, message):
    with pytest.raises(ValueError) as error:
        WorkloadConfig(**knobs)
    assert str(error.value).startswith(message)


def test_workload_config_takes_the_largest_knobs_in_range():
    WorkloadConfig(batch_lines_per_s=1e6, tool_result_tokens_median=float(MAX_TOKENS), tool_sigma=MAX_SIGMA,
                   think_time_sigma=MAX_SIGMA, tool_result_tokens_sigma=MAX_SIGMA, session_rate_per_s=1e-6,
                   think_time_median_s=1e6, tool_median_s_range=(1e6, 1e6), max_context_tokens=MAX_TOKENS)


@pytest.mark.parametrize("flags, message", [
    (["--think-time-sigma", "1e308"], "--think-time-sigma must be at most 4"),
    (["--tool-result-tokens-sigma", "inf"], "--tool-result-tokens-sigma must be at most 4"),
    (["--tool-result-tokens-median", "inf"], "--tool-result-tokens-median must be at most 10,000,000 tokens"),
    (["--think-time-sigma", "inf"], "--think-time-sigma must be at most 4"),
    (["--tool-sigma", "inf"], "--tool-sigma must be at most 4"),
    (["--tool-sigma", "nan"], "--tool-sigma must be a number, 0 or more, not nan"),
    (["--think-time-median-s", "inf"], "--think-time-median-s must be at most 1,000,000 s"),
    (["--think-time-median-s", "nan"], "--think-time-median-s must be positive, not nan"),
    (["--session-rate-per-s", "inf"], "--session-rate-per-s must be at most 1,000,000"),
    (["--tool-median-s-range", "1", "inf"], "--tool-median-s-range takes LOW HIGH"),
    (["--batch-lines-per-s", "inf"], "--batch-lines-per-s must be at most 1,000,000"),
])
def test_workload_cli_non_finite_or_huge_flags_are_one_error_line_naming_the_flag(tmp_path, capsys, flags, message):
    out = tmp_path / "w.jsonl"
    assert main(["workload", "generate", "--tenants", "2", "--sessions", "2", *flags, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1
    assert not out.exists()


def test_blocks_of_a_prompt_past_the_context_cap_take_no_memory_and_keep_later_ids():
    counter = [0]
    blocks = _Blocks(16, counter, limit=100)
    blocks.grow(40)                      # 3 blocks, the last partial
    assert blocks.ids == [1, 2, 3] and counter == [3]
    grown = blocks.fork()
    grown.grow(30)                       # 70 tokens: the partial tail gets a new id
    assert grown.ids == [1, 2, 4, 5, 6] and counter == [6]
    huge = blocks.fork()
    huge.grow(10**12)                    # never sent: no ids made, the counter moves on as if they were
    assert huge.ids == [1, 2, 3] and huge.num_tokens == 10**12 + 40
    assert counter == [6 + -(-(10**12 + 40) // 16) - 40 // 16]
    before = counter[0]
    huge.grow(5)                         # the partial tail would be replaced: one id more
    assert huge.ids == [1, 2, 3] and counter == [before + 1]


def test_generate_workload_stops_at_its_size_limits_naming_the_flags():
    config = WorkloadConfig(num_tenants=2, num_sessions=20, seed=1)
    generate_workload(config, _patterns(), limits=WorkloadLimits())
    with pytest.raises(ValueError, match=r"the sessions would hold more than the 500 block ids .*--sessions, "
                                         r"--tenants or --max-context-tokens, or raise --block-size"):
        generate_workload(config, _patterns(), limits=WorkloadLimits(max_block_ids=500))
    with pytest.raises(ValueError, match="the sessions would make more than the 5 requests a workload may have: "
                                         "lower --sessions or --tenants"):
        generate_workload(config, _patterns(), limits=WorkloadLimits(max_requests=5))
    batch = WorkloadConfig(num_tenants=2, num_sessions=20, seed=1, batch_lines_per_s=1000)
    with pytest.raises(ValueError, match=r"^--batch-lines-per-s 1000 \([\d,]+ lines over the sessions' [\d,]+ s\) "
                                         r"would make more than the 10,000 requests"):
        generate_workload(batch, _patterns(), limits=WorkloadLimits(max_requests=10_000))


def test_a_tool_result_far_past_the_context_ends_its_session_at_no_cost():
    config = WorkloadConfig(num_tenants=1, num_sessions=50, block_size=1, tool_result_tokens_median=1e7,
                            tool_result_tokens_sigma=0.0, seed=2)
    records = generate_workload(config, _patterns(), limits=WorkloadLimits(max_block_ids=200_000))
    assert {r.after for r in records} == {"start"}   # each session ends at its first tool result
    assert all(len(r.hash_ids) == r.input_tokens for r in records)


def test_workload_summary_counts_batch_lines_apart_from_sessions(tmp_path, capsys):
    out = tmp_path / "w.jsonl"
    assert main(["workload", "generate", "--tenants", "2", "--sessions", "2", "--seed", "7",
                 "--batch-lines-per-s", "0.5", "-o", str(out)]) == 0
    _, records = iter_trace(io.StringIO(out.read_text()))
    records = list(records)
    sessions = {(r.tenant, r.session) for r in records if r.session is not None}
    num_batch = sum(r.session is None for r in records)
    assert len(sessions) == 4 and num_batch > 0
    assert capsys.readouterr().err == (f"wrote {len(records)} requests ({len(records) - num_batch} in 4 sessions of "
                                       f"2 tenant(s), and {num_batch} batch lines without a session) to {out}\n")
    assert main(["workload", "generate", "--tenants", "2", "--sessions", "2", "--seed", "7", "-o", str(out)]) == 0
    num_plain = sum(1 for line in out.read_text().splitlines()[1:] if json.loads(line))
    assert capsys.readouterr().err == f"wrote {num_plain} requests in 4 sessions of 2 tenant(s) to {out}\n"


def test_workload_summary_says_one_session_and_one_batch_line_in_the_singular():
    from agents_trace.workload.cli import summary
    from cache.trace_format import TraceRecord

    one = TraceRecord(0.0, 16, 4, tenant="a", session="s")
    assert summary([one], 1) == "1 request in 1 session of 1 tenant(s)"
    assert summary([one, TraceRecord(1.0, 16, 4, tenant="a")], 1) == (
        "2 requests (1 in 1 session of 1 tenant(s), and 1 batch line without a session)")
