from __future__ import annotations

import io

import pytest

from cache.trace_format import (TraceFormatError, TraceHeader, TraceRecord, after_tool_names,
                                iter_trace, read_trace, write_trace)


def test_trace_round_trip_keeps_every_field():
    records = [TraceRecord(0.0, 40, 5, tenant="a", session="s1", after="start", tool_calls=["ls"],
                           hash_ids=[1, 2, 3], service_tier="flex"),
               TraceRecord(1.5, 50, 2, tenant="a", session="s1", after="tool:ls", hash_ids=[1, 2, 3, 4])]
    buffer = io.StringIO()
    assert write_trace(buffer, records, TraceHeader(block_size=16, note="x")) == 2
    header, parsed = iter_trace(io.StringIO(buffer.getvalue()))
    assert header.block_size == 16 and header.note == "x"
    assert [r.to_json() for r in parsed] == [r.to_json() for r in records]


def test_trace_rejects_a_service_tier_that_is_not_a_string():
    with pytest.raises(TraceFormatError, match="line 1: 'service_tier' must be a string"):
        list(iter_trace(io.StringIO('{"t": 0, "input_tokens": 4, "output_tokens": 1, "service_tier": 1}\n'))[1])


def test_trace_reads_mooncake_lines_as_is(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 1500, "input_length": 600, "output_length": 7, "hash_ids": [4, 9]}\n')
    header, records = read_trace(path)
    assert header.block_size == 512
    assert records[0].t == 1.5 and records[0].tenant == "default" and records[0].hash_ids == [4, 9]


def test_trace_rejects_wrong_hash_id_count_with_line_number():
    text = '{"format": "stepahead-trace/1", "block_size": 16}\n{"t": 0, "input_tokens": 40, "output_tokens": 1, "hash_ids": [1]}\n'
    with pytest.raises(TraceFormatError, match="line 2"):
        list(iter_trace(io.StringIO(text))[1])


def test_trace_rejects_non_json_line():
    with pytest.raises(TraceFormatError, match="line 1: not JSON"):
        list(iter_trace(io.StringIO("{nope\n"))[1])


def test_trace_reads_shared_mooncake_file():
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "shared" / "data" / "mooncake_conversation_first_half.jsonl"
    if not path.exists():
        pytest.skip("shared data not beside the checkout")
    _, records = read_trace(path)
    assert len(records) == 5606
    assert all(len(r.hash_ids) == -(-r.input_tokens // 512) for r in records)


def test_after_tool_names_known_answers():
    assert after_tool_names("tool:ls") == ["ls"]
    assert after_tool_names("tool:ls,tool:cd") == ["ls", "cd"]
    assert after_tool_names("tool:ls, cd") == ["ls", "cd"]
    assert after_tool_names("tool:") == []
    assert after_tool_names("user") == [] and after_tool_names("start") == [] and after_tool_names(None) == []
