"""Generated workloads of other seeds name other blocks, the
replay table keeps long labels whole and gives sessionless lines a row of their own,
sessions left out for the context cap are warned about, and the tool-schema flag says
what it counts and takes 0."""
from __future__ import annotations

import pytest

from agents_trace.replay.client import RequestResult
from agents_trace.replay.prompts import PromptBuilder
from agents_trace.replay.report import build_report, format_table
from agents_trace.workload import cli as workload_cli
from agents_trace.workload.generator import WorkloadConfig, generate_workload
from agents_trace.workload.tool_patterns import ToolPatterns, packaged_patterns

PATTERNS = [ToolPatterns("d", {"START": {"USER": 1}, "USER": {"ls": 1},
                               "ls": {"cat": 1}, "cat": {"ASSISTANT_TEXT": 1},
                               "ASSISTANT_TEXT": {"END": 1}})]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_a_workload_of_another_seed_shares_no_replayed_prompt_with_the_first():
    """QA107 #1: B's first prompt (seed 12345) was 816 of 866 tokens equal to a prompt of
    A (seed 0), so a gateway warmed by A reported it cached."""
    a = generate_workload(WorkloadConfig(num_tenants=1, num_sessions=3, seed=0), packaged_patterns())
    b = generate_workload(WorkloadConfig(num_tenants=1, num_sessions=1, seed=12345, system_prompt_tokens=(100, 120)),
                          packaged_patterns())
    assert {r.tenant for r in a} == {r.tenant for r in b} == {"tenant0"}   # the same tenant names...
    a_ids = {i for r in a for i in r.hash_ids}
    assert not a_ids & {i for r in b for i in r.hash_ids}                  # ...but none of the same blocks
    builder = PromptBuilder(16, 256)
    first = builder.prompt(b[0])
    shared = max(_common_prefix(builder.prompt(r), first) for r in a)
    assert shared < 16, f"{shared} of B's first {len(first)} tokens open a prompt of A"
    assert all(0 < i < 2**53 for i in a_ids)   # exact in every JSON reader


def test_the_same_workload_twice_names_the_same_blocks():
    config = WorkloadConfig(num_tenants=2, num_sessions=3, seed=9)
    first, again = generate_workload(config, packaged_patterns()), generate_workload(config, packaged_patterns())
    assert [r.hash_ids for r in first] == [r.hash_ids for r in again]
    # a tenant's sessions still open with its shared prefix (the same first block)
    assert len({r.hash_ids[0] for r in first if r.tenant == "tenant0"}) == 1


def _result(tenant: str, session: str | None, step: int, ttft: float) -> RequestResult:
    return RequestResult(tenant, session, step, 0.0, ttft_s=ttft, e2e_s=ttft * 2, prompt_tokens=100)


def test_the_table_shows_long_tenant_names_whole_so_two_tenants_never_share_a_row_name():
    """QA107 #2: both showed as `tenant customer-`."""
    report = build_report([_result("customer-support-bot", "a", 0, 0.01),
                           _result("customer-support-agent", "b", 0, 0.5)], 1.0)
    labels = [line.split()[1] for line in format_table(report).splitlines() if line.startswith("tenant ")]
    assert labels == ["customer-support-agent", "customer-support-bot"]
    lines = format_table(report).splitlines()
    assert len({len(line) for line in lines if not line.startswith("-")}) == 1   # columns still line up


def test_sessionless_lines_get_their_own_row_and_are_no_step_of_a_session():
    """QA107 #3: 4 first steps and 8 batch lines were one `step 0` row."""
    results = [_result("a", "s1", 0, 0.1), _result("a", "s1", 1, 0.2), _result("a", "s2", 0, 0.1)]
    results += [RequestResult("a", None, 0, 1.0, ttft_s=3.0, e2e_s=4.0, prompt_tokens=300, service_tier="flex")
                for _ in range(5)]
    report = build_report(results, 2.0)
    assert report["per_step"]["0"]["requests"] == 2 and report["per_step"]["1"]["requests"] == 1
    assert report["no_session"]["requests"] == 5 and report["no_session"]["ttft_p50_s"] == 3.0
    assert report["total"]["requests"] == 8
    rows = {line.split()[0] + (" " + line.split()[1] if line.startswith(("step", "no ")) else ""): line
            for line in format_table(report).splitlines()[2:]}
    assert rows["step 0"].split()[2] == "2" and rows["no session"].split()[2] == "5"
    assert "no_session" not in build_report(results[:3], 1.0)   # sessions only: no such row


def test_sessions_left_out_for_the_context_cap_are_warned_about_with_their_count():
    """QA107 #4: 20 sessions asked, 8 written, exit 0 and not a word."""
    config = WorkloadConfig(num_tenants=1, num_sessions=20, system_prompt_tokens=(100, 100),
                            tool_schema_tokens_per_tool=1, user_turn_tokens=(1, 1000), max_context_tokens=600)
    warnings: list[str] = []
    records = generate_workload(config, packaged_patterns(), on_warning=warnings.append)
    made = len({r.session for r in records})
    assert 0 < made < 20
    assert len(warnings) == 1 and f"{20 - made} of the 20 sessions asked for are left out" in warnings[0]
    assert "--max-context-tokens 600" in warnings[0]
    fits: list[str] = []
    generate_workload(WorkloadConfig(num_tenants=1, num_sessions=5), PATTERNS, on_warning=fits.append)
    assert fits == []


def test_the_cli_prints_the_left_out_sessions_warning(tmp_path, capsys):
    out = tmp_path / "w.jsonl"
    assert workload_cli.main(["generate", "--tenants", "1", "--sessions", "20", "--system-prompt-tokens", "100",
                              "100", "--tool-schema-tokens-per-tool", "1", "--user-turn-tokens", "1", "1000",
                              "--max-context-tokens", "600", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: " in err and "of the 20 sessions asked for are left out" in err


def test_tool_schema_flag_says_it_counts_at_most_12_tools_and_takes_0(tmp_path, capsys):
    """QA107 #5: the cap was in no help text, and 0 (no tool schemas) was refused."""
    with pytest.raises(SystemExit):
        workload_cli.main(["generate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "for at most 12 tools" in help_text and "0: no tool schemas" in help_text
    none = generate_workload(WorkloadConfig(num_tenants=1, num_sessions=2, tool_schema_tokens_per_tool=0,
                                            system_prompt_tokens=(100, 100), user_turn_tokens=(5, 5)), PATTERNS)
    assert none[0].input_tokens == 105   # the system prompt and the user turn, no schema
    with pytest.raises(ValueError, match="--tool-schema-tokens-per-tool must be at least 0, not -1"):
        WorkloadConfig(tool_schema_tokens_per_tool=-1)
