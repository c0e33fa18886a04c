from __future__ import annotations

from agents_trace.workload.sequences import arrival_symbols, session_sequences
from cache.trace_format import TraceRecord


def test_session_sequences_known_answer():
    records = [
        TraceRecord(0.0, 10, 1, tenant="a", session="s", after="start", tool_calls=["ls"]),
        TraceRecord(4.0, 20, 1, tenant="a", session="s", after="tool:ls", tool_calls=[]),
        TraceRecord(10.0, 30, 1, tenant="a", session="s", after="user", tool_calls=["cat"]),
        TraceRecord(11.0, 10, 1, tenant="b", session="s", after="start"),
    ]
    out = session_sequences(records, speed=2.0)
    assert out["a"] == ([["USER", "ls", "ASSISTANT_TEXT", "USER"]], [[None, 2.0, None, 3.0]])
    assert out["b"] == ([["USER", "ASSISTANT_TEXT"]], [[None, None]])


def test_session_sequences_as_seen_by_a_token_id_replay():
    """No messages reach the gateway: every request is USER, every response text."""
    records = [
        TraceRecord(0.0, 10, 1, tenant="a", session="s", after="start", tool_calls=["ls"]),
        TraceRecord(4.0, 20, 1, tenant="a", session="s", after="tool:ls,cat", tool_calls=[]),
        TraceRecord(10.0, 30, 1, tenant="a", session="s", after="user", tool_calls=["cat"]),
    ]
    out = session_sequences(records, speed=2.0, as_seen_by_gateway=True)
    assert out["a"] == ([["USER", "ASSISTANT_TEXT"] * 3],
                        [[None, None, 2.0, None, 3.0, None]])


def test_arrival_symbols_name_every_tool_of_the_after_field():
    assert arrival_symbols("tool:ls,tool:cd") == ["ls", "cd"]
    assert arrival_symbols("user") == ["USER"] and arrival_symbols(None) == ["USER"]
