from __future__ import annotations

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
