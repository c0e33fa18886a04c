from __future__ import annotations

import pytest

from agents_trace.replay.prompts import PromptBuilder
from cache.trace_format import TraceRecord


def test_prompt_shared_hash_ids_share_exactly_their_tokens():
    builder = PromptBuilder(block_size=4, vocab_size=100)
    a = builder.prompt(TraceRecord(0, 10, 1, tenant="t", hash_ids=[1, 2, 3]))
    b = builder.prompt(TraceRecord(0, 12, 1, tenant="t", hash_ids=[1, 2, 9]))
    assert len(a) == 10 and len(b) == 12
    assert a[:8] == b[:8] and a[8:10] != b[8:10]
    assert all(3 <= x < 100 for x in a + b)


def test_prompt_same_ids_in_other_tenant_differ():
    builder = PromptBuilder(block_size=4, vocab_size=1000)
    a = builder.prompt(TraceRecord(0, 8, 1, tenant="a", hash_ids=[1, 2]))
    b = builder.prompt(TraceRecord(0, 8, 1, tenant="b", hash_ids=[1, 2]))
    assert a != b


def test_prompt_is_deterministic_across_builders_and_capped():
    record = TraceRecord(0, 20, 1, tenant="t", hash_ids=[5, 6, 7, 8, 9])
    assert PromptBuilder(4, 50).prompt(record) == PromptBuilder(4, 50).prompt(record)
    assert PromptBuilder(4, 50, max_input_tokens=6).prompt(record) == PromptBuilder(4, 50).prompt(record)[:6]


def test_prompt_without_hash_ids_extends_within_a_session():
    builder = PromptBuilder(4, 50)
    short = builder.prompt(TraceRecord(0, 5, 1, tenant="t", session="s"))
    longer = builder.prompt(TraceRecord(1, 9, 1, tenant="t", session="s"))
    assert longer[:5] == short


def test_lines_without_session_or_hash_ids_at_one_time_are_prompts_of_their_own():
    """As the simulator reads them (cache/sim/requests.py): they share no token, however
    equal their times and lengths; the same line of the same trace is the same prompt."""
    builder = PromptBuilder(16, 256)
    line = TraceRecord(0.0, 320, 4, tenant="acme")
    prompts = [builder.prompt(line, index) for index in range(6)]
    assert all(len(p) == 320 for p in prompts)
    assert all(p[:16] != q[:16] for i, p in enumerate(prompts) for q in prompts[i + 1:])
    assert PromptBuilder(16, 256).prompt(line, 3) == prompts[3]


def test_lines_without_session_or_hash_ids_differ_across_traces_at_other_times():
    builder = PromptBuilder(16, 256)
    assert builder.prompt(TraceRecord(0.0, 64, 1), 0)[:16] != builder.prompt(TraceRecord(7.5, 64, 1), 0)[:16]


def test_a_line_without_session_or_hash_ids_needs_its_request_index():
    with pytest.raises(ValueError, match="request_index"):
        PromptBuilder(16, 256).prompt(TraceRecord(0.0, 64, 1))
    session_line = TraceRecord(0.0, 64, 1, session="s")
    assert PromptBuilder(16, 256).prompt(session_line) == PromptBuilder(16, 256).prompt(session_line, 5)
