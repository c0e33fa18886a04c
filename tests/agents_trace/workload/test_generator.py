from __future__ import annotations

import collections
import io
import math
import random
import subprocess
import sys

from agents_trace.workload.generator import WorkloadConfig, generate_workload, tool_median_s
from agents_trace.workload.tool_patterns import (ToolPatterns, default_pattern_files, learn_patterns,
                                                 packaged_patterns)
from cache.trace_format import iter_trace

PATTERNS = [ToolPatterns("d", {"START": {"USER": 1}, "USER": {"ls": 1},
                               "ls": {"cat": 1}, "cat": {"ASSISTANT_TEXT": 1},
                               "ASSISTANT_TEXT": {"END": 1}})]


def test_generate_workload_session_follows_pattern_and_prompts_extend():
    config = WorkloadConfig(num_tenants=1, num_sessions=1, seed=3)
    records = generate_workload(config, PATTERNS)
    assert [r.after for r in records] == ["start", "tool:ls", "tool:cat"]
    assert [r.tool_calls for r in records] == [["ls"], ["cat"], []]
    for prev, cur in zip(records, records[1:]):
        full = prev.input_tokens // config.block_size
        assert cur.hash_ids[:full] == prev.hash_ids[:full]  # full blocks are reused
        assert cur.input_tokens > prev.input_tokens + prev.output_tokens
        assert cur.t > prev.t
    assert all(len(r.hash_ids) == math.ceil(r.input_tokens / config.block_size) for r in records)


def test_generate_workload_tenants_share_their_own_prefix_only():
    config = WorkloadConfig(num_tenants=2, num_sessions=5, seed=1)
    records = generate_workload(config, PATTERNS)
    firsts = {}
    for r in records:
        if r.after == "start":
            firsts.setdefault(r.tenant, []).append(r.hash_ids)
    for tenant, prompts in firsts.items():
        assert len({p[0] for p in prompts}) == 1  # every session starts with the tenant prefix
    assert sorted(firsts) == ["tenant0", "tenant1"]
    assert [r.t for r in records] == sorted(r.t for r in records)


def test_generate_workload_is_deterministic_by_seed():
    a = generate_workload(WorkloadConfig(seed=5, num_sessions=3), packaged_patterns())
    b = generate_workload(WorkloadConfig(seed=5, num_sessions=3), packaged_patterns())
    assert [r.to_json() for r in a] == [r.to_json() for r in b]


def test_the_progress_callback_counts_sessions_and_changes_nothing():
    config = WorkloadConfig(seed=5, num_tenants=3, num_sessions=4)
    calls = []
    watched = generate_workload(config, packaged_patterns(), on_session=lambda: calls.append(1))
    assert len(calls) == 12
    assert [r.to_json() for r in watched] == [r.to_json() for r in generate_workload(config, packaged_patterns())]


def test_tool_median_s_lies_in_range_and_differs_by_tool():
    config = WorkloadConfig()
    medians = {tool_median_s(config, t) for t in ("ls", "cat", "grep", "mv")}
    assert len(medians) == 4 and all(0.5 <= m <= 30.0 for m in medians)


def test_tool_seed_fixes_tool_durations_across_workloads_of_the_same_tenants():
    tools = ("ls", "cat", "grep", "mv")
    seed0, seed7 = WorkloadConfig(seed=0), WorkloadConfig(seed=7)
    assert [tool_median_s(seed0, t) for t in tools] != [tool_median_s(seed7, t) for t in tools]
    shared = WorkloadConfig(seed=7, tool_seed=0)
    assert [tool_median_s(shared, t) for t in tools] == [tool_median_s(seed0, t) for t in tools]
    # tool_seed only moves durations: the sessions are still seed 7's.
    a = generate_workload(WorkloadConfig(seed=7, num_sessions=3), packaged_patterns())
    b = generate_workload(WorkloadConfig(seed=7, tool_seed=0, num_sessions=3), packaged_patterns())
    assert [(r.session, r.after, r.hash_ids) for r in a][:1] == [(r.session, r.after, r.hash_ids) for r in b][:1]
    assert [r.t for r in a] != [r.t for r in b]


def test_packaged_patterns_equal_patterns_learned_from_shared_data():
    files = default_pattern_files()
    if len(files) < 2:
        import pytest

        pytest.skip("shared data not beside the checkout")
    learned = {p.domain: (p.transitions, p.turn_counts) for p in learn_patterns(files)}
    assert learned == {p.domain: (p.transitions, p.turn_counts) for p in packaged_patterns()}


def test_learn_patterns_counts_user_turns_per_session(tmp_path):
    path = tmp_path / "seq.jsonl"
    path.write_text('{"domain": "d", "steps": ["USER", "ls", "ASSISTANT_TEXT", "USER", "ASSISTANT_TEXT"]}\n'
                    '{"domain": "d", "steps": ["USER", "ASSISTANT_TEXT"]}\n'
                    '{"domain": "d", "steps": ["USER", "cat", "ASSISTANT_TEXT", "USER", "ASSISTANT_TEXT"]}\n')
    (patterns,) = learn_patterns([path])
    assert patterns.turn_counts == {1: 1, 2: 2}


def test_sessions_have_the_recorded_number_of_turns_not_the_chains():
    # the chain alone ends after a text answer with odds 1/2; the records all had 3 turns
    chain = {"START": {"USER": 1}, "USER": {"ls": 1}, "ls": {"ASSISTANT_TEXT": 1},
             "ASSISTANT_TEXT": {"END": 1, "USER": 1}}
    rng = random.Random(0)
    sessions = [ToolPatterns("d", chain, {3: 1}).sample_session(rng) for _ in range(50)]
    assert all(steps == ["USER", "ls", "ASSISTANT_TEXT"] * 3 for steps in sessions)
    unconstrained = [ToolPatterns("d", chain).sample_session(rng).count("USER") for _ in range(200)]
    assert min(unconstrained) == 1 and max(unconstrained) > 3
    drawn = collections.Counter(ToolPatterns("d", chain, {1: 1, 4: 3}).sample_session(rng).count("USER")
                                for _ in range(400))
    assert set(drawn) == {1, 4} and 0.65 < drawn[4] / 400 < 0.85


def test_workload_cli_writes_a_readable_trace(tmp_path):
    out = tmp_path / "w.jsonl"
    subprocess.run([sys.executable, "-m", "agents_trace.workload", "generate", "--tenants", "2",
                    "--sessions", "2", "--seed", "4", "--tool-sigma", "0.3", "-o", str(out)],
                   check=True, timeout=60)
    header, records = iter_trace(io.StringIO(out.read_text()))
    records = list(records)
    assert header.block_size == 16 and records and {r.tenant for r in records} == {"tenant0", "tenant1"}


def test_stepahead_cli_has_workload_generate(tmp_path):
    from gateway.cli import main

    out = tmp_path / "w.jsonl"
    assert main(["workload", "generate", "--tenants", "1", "--sessions", "1", "-o", str(out)]) == 0
    assert out.read_text().startswith('{"format": "stepahead-trace/1"')


def test_workload_generate_help_explains_every_knob_with_its_default():
    import argparse
    import dataclasses

    from agents_trace.workload.cli import add_generate_arguments
    from agents_trace.workload.generator import WorkloadConfig

    parser = argparse.ArgumentParser()
    add_generate_arguments(parser)
    by_dest = {action.dest: action for action in parser._actions}
    for field in dataclasses.fields(WorkloadConfig):
        action = by_dest[field.name]
        assert action.default == getattr(WorkloadConfig(), field.name)
        # a default of None is said in words (--tool-seed: "the --seed value"), never as "None"
        default = "(default: %(default)s)" if action.default is not None else "(default: the "
        assert action.help and default in action.help, field.name
    assert "(default: 0.5)" in " ".join(parser.format_help().split())


def test_workload_that_fits_no_request_is_an_error_not_an_empty_file(tmp_path, capsys):
    import pytest

    from gateway.cli import main

    with pytest.raises(ValueError, match="--max-context-tokens 600"):
        generate_workload(WorkloadConfig(num_tenants=2, num_sessions=2, max_context_tokens=600), PATTERNS)
    out = tmp_path / "w.jsonl"
    assert main(["workload", "generate", "--tenants", "2", "--sessions", "2", "--max-context-tokens", "600",
                 "-o", str(out)]) == 2
    assert "error: no request fits in --max-context-tokens 600" in capsys.readouterr().err
    assert not out.exists()


def test_a_tenant_left_without_any_request_is_an_error_naming_it():
    import pytest

    def domain(name: str, num_tools: int) -> ToolPatterns:
        tools = [f"{name}{i}" for i in range(num_tools)]
        chain = {"START": {"USER": 1}, "USER": {tools[0]: 1}, **{t: {"ASSISTANT_TEXT": 1} for t in tools},
                 "ASSISTANT_TEXT": {"END": 1}}
        return ToolPatterns(name, chain)

    # tenant0: 100 system-prompt tokens + 12 tools x 60 schema tokens = 820; tenant1: 160
    patterns = [domain("wide", 12), domain("narrow", 1)]
    config = WorkloadConfig(num_tenants=2, num_sessions=3, system_prompt_tokens=(100, 100),
                            max_context_tokens=600)
    with pytest.raises(ValueError, match=r"1 of the 2 tenants .*\(tenant0's takes 820 tokens"):
        generate_workload(config, patterns)
    roomy = generate_workload(WorkloadConfig(num_tenants=2, num_sessions=3, system_prompt_tokens=(100, 100),
                                             max_context_tokens=1200), patterns)
    assert {r.tenant for r in roomy} == {"tenant0", "tenant1"}


def test_recorded_turns_can_be_switched_off_for_the_chains_own_odds(tmp_path):
    chain = {"START": {"USER": 1}, "USER": {"ls": 1}, "ls": {"ASSISTANT_TEXT": 1},
             "ASSISTANT_TEXT": {"END": 1, "USER": 1}}
    patterns = [ToolPatterns("d", chain, {3: 1})]

    def turns(recorded: bool) -> list[int]:
        config = WorkloadConfig(num_tenants=1, num_sessions=40, seed=2, recorded_turns=recorded)
        starts = collections.Counter(r.session for r in generate_workload(config, patterns) if r.after != "tool:ls")
        return sorted(starts.values())

    assert set(turns(True)) == {3}
    assert len(set(turns(False))) > 2
    out = tmp_path / "chain.jsonl"
    subprocess.run([sys.executable, "-m", "agents_trace.workload", "generate", "--sessions", "2",
                    "--no-recorded-turns", "-o", str(out)], check=True, timeout=60)
    _, records = iter_trace(io.StringIO(out.read_text()))
    assert len(list(records)) > 0


def test_impossible_knobs_are_errors_naming_the_flag(tmp_path, capsys):
    import pytest

    from gateway.cli import main

    out = tmp_path / "w.jsonl"
    for flags, message in ((["--tenants", "0"], "--tenants must be at least 1"),
                           (["--sessions", "-3"], "--sessions must be at least 1"),
                           (["--session-rate-per-s", "0"], "--session-rate-per-s must be positive"),
                           (["--think-time-sigma", "-1"], "--think-time-sigma must be a number, 0 or more"),
                           (["--user-turn-tokens", "50", "10"], "--user-turn-tokens takes LOW HIGH"),
                           (["--batch-lines-per-s", "-1"], "--batch-lines-per-s must be a number, 0 or more"),
                           (["--batch-lines-per-s", "1", "--batch-prompt-tokens", "9000"],
                            "--batch-prompt-tokens plus --batch-output-tokens must fit --max-context-tokens")):
        assert main(["workload", "generate", *flags, "-o", str(out)]) == 2
        assert f"error: {message}" in capsys.readouterr().err
        assert not out.exists()
    with pytest.raises(ValueError, match="--tenants must be at least 1"):
        WorkloadConfig(num_tenants=0)
    assert main(["workload", "generate", "--tenants", "1", "--sessions", "1", "-o", str(tmp_path)]) == 2
    assert "error: cannot write" in capsys.readouterr().err


def test_batch_lines_are_flex_fresh_and_leave_the_sessions_as_they_were():
    """Batch API lines: evenly spaced over the sessions' span, each tenant in turn, in the
    flex tier, without a session, each of blocks no other request has; the sessions are
    the same as in the workload without them."""
    plain = WorkloadConfig(num_tenants=2, num_sessions=4, seed=3)
    with_batch = WorkloadConfig(num_tenants=2, num_sessions=4, seed=3, batch_lines_per_s=0.5,
                                batch_prompt_tokens=100, batch_output_tokens=7)
    sessions = generate_workload(plain, PATTERNS)
    records = generate_workload(with_batch, PATTERNS)
    batch = [r for r in records if r.service_tier == "flex"]
    assert [r.to_json() for r in records if r.service_tier is None] == [r.to_json() for r in sessions]
    assert len(batch) == int(max(r.t for r in sessions) * 0.5) > 0
    assert [r.t for r in batch] == [n / 0.5 for n in range(len(batch))]
    assert [r.tenant for r in batch[:4]] == ["tenant0", "tenant1", "tenant0", "tenant1"]
    assert all(r.session is None and r.input_tokens == 100 and r.output_tokens == 7
               and len(r.hash_ids) == math.ceil(100 / with_batch.block_size) for r in batch)
    for tenant in ("tenant0", "tenant1"):
        batch_ids = [i for r in batch if r.tenant == tenant for i in r.hash_ids]
        session_ids = {i for r in sessions if r.tenant == tenant for i in r.hash_ids}
        assert len(set(batch_ids)) == len(batch_ids) and not set(batch_ids) & session_ids


def test_an_output_path_it_cannot_write_is_one_line_naming_it_before_any_draw(tmp_path, monkeypatch, capsys):
    import agents_trace.workload.cli as workload_cli
    from gateway.cli import main

    def never(*args, **kwargs):
        raise AssertionError("the workload was drawn before the output was checked")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(workload_cli, "generate_workload", never)
    for output, shown in ((".", "."), ("/", "/"), ("", "''"), (str(tmp_path), str(tmp_path)),
                          (str(tmp_path / "no" / "x.jsonl"), str(tmp_path / "no" / "x.jsonl"))):
        assert main(["workload", "generate", "--tenants", "1", "--sessions", "1", "-o", output]) == 2, output
        err = capsys.readouterr().err
        assert err.startswith(f"error: cannot write {shown}: ") and err.count("\n") == 1, err
        assert "partial" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_tool_after_a_text_answer_comes_from_a_user_turn_not_a_phantom_call():
    """A step after a text answer grows by a user turn, after a think time; a step after
    tool calls grows by the result of the tool the previous reply called, after its run."""
    chain = {"START": {"USER": 1}, "USER": {"ls": 1}, "ls": {"ASSISTANT_TEXT": 1},
             "ASSISTANT_TEXT": {"cat": 1, "END": 1}, "cat": {"ASSISTANT_TEXT": 1}}
    config = WorkloadConfig(num_tenants=1, num_sessions=30, seed=2, user_turn_tokens=(5, 5),
                            tool_result_tokens_median=10, tool_result_tokens_sigma=0, think_time_median_s=1000,
                            think_time_sigma=0, tool_median_s_range=(1, 1), tool_sigma=0, recorded_turns=False)
    records = generate_workload(config, [ToolPatterns("d", chain)])
    sessions = collections.defaultdict(list)
    for r in records:
        sessions[r.session].append(r)
    kinds = collections.Counter()
    for steps in sessions.values():
        for prev, cur in zip(steps, steps[1:]):
            grew = cur.input_tokens - prev.input_tokens - prev.output_tokens
            waited = cur.t - prev.t - 0.02 * prev.output_tokens
            if prev.tool_calls:
                assert cur.after == f"tool:{prev.tool_calls[0]}" and grew == 10 and abs(waited - 1) < 1e-6
            else:
                assert cur.after == "user" and grew == 5 and abs(waited - 1000) < 1e-6
            kinds[cur.after] += 1
    assert kinds["user"] and kinds["tool:cat"] and kinds["tool:ls"]
