from __future__ import annotations

import io

import pytest

from cache.trace_format import (BlockSizeConflict, TraceFormatError, TraceHeader, TraceRecord, after_tool_names,
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


def test_trace_round_trip_keeps_a_lines_tools_and_tool_choice():
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    records = [TraceRecord(0.0, 40, 5, session="s", messages=[{"role": "user", "content": "hi"}], tools=tools,
                           tool_choice={"type": "function", "function": {"name": "get_weather"}}),
               TraceRecord(1.0, 50, 2, session="s", messages=[{"role": "user", "content": "hi"}], tools=tools,
                           tool_choice="none"),
               TraceRecord(2.0, 60, 2, session="s")]
    buffer = io.StringIO()
    write_trace(buffer, records)
    assert [("tools" in line, "tool_choice" in line) for line in buffer.getvalue().splitlines()[1:]] == [
        (True, True), (True, True), (False, False)]
    _, parsed = iter_trace(io.StringIO(buffer.getvalue()))
    assert list(parsed) == records


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


MOONCAKE = {"timestamp": 1500, "input_length": 5, "output_length": 8, "hash_ids": [1]}
STEPAHEAD = {"t": 0.5, "input_tokens": 5, "output_tokens": 8, "hash_ids": [1]}


@pytest.mark.parametrize("base, key, value, message", [
    (MOONCAKE, "timestamp", "x", "'timestamp' must be a non-negative number of milliseconds"),
    (MOONCAKE, "timestamp", True, "'timestamp' must be a non-negative number of milliseconds"),
    (MOONCAKE, "timestamp", -1, "'timestamp' must be a non-negative number of milliseconds"),
    (MOONCAKE, "timestamp", float("nan"), "'timestamp' must be a non-negative number of milliseconds"),
    pytest.param(MOONCAKE, "timestamp", 10 ** 400, "'timestamp' must be a non-negative number of milliseconds",
                 id="timestamp-past-float-range"),
    (MOONCAKE, "timestamp", None, "'timestamp' must be a non-negative number of milliseconds"),
    (MOONCAKE, "input_length", 5.5, "'input_length' must be a non-negative integer"),
    (MOONCAKE, "output_length", False, "'output_length' must be a non-negative integer"),
    (MOONCAKE, "input_length", 10 ** 12,
     "'input_length' is 1000000000000, more than the 10,000,000 tokens a call may have"),
    (MOONCAKE, "input_length", 600, "1 hash_ids for 600 tokens; expected 2 blocks of 512"),
    (MOONCAKE, "hash_ids", "abc", "'hash_ids' must be a list of integers"),
    (MOONCAKE, "hash_ids", [1.0], "'hash_ids' must be a list of integers"),
    (MOONCAKE, "hash_ids", [True], "'hash_ids' must be a list of integers"),
    (MOONCAKE, "hash_ids", {"1": 1}, "'hash_ids' must be a list of integers"),
    (STEPAHEAD, "t", "0", "'t' must be a non-negative number of seconds"),
    (STEPAHEAD, "t", False, "'t' must be a non-negative number of seconds"),
    (STEPAHEAD, "t", -0.5, "'t' must be a non-negative number of seconds"),
    (STEPAHEAD, "t", float("inf"), "'t' must be a non-negative number of seconds"),
    (STEPAHEAD, "input_tokens", -1, "'input_tokens' must be a non-negative integer"),
    (STEPAHEAD, "output_tokens", "8", "'output_tokens' must be a non-negative integer"),
    (STEPAHEAD, "output_tokens", 10_000_001,
     "'output_tokens' is 10000001, more than the 10,000,000 tokens a call may have"),
    (STEPAHEAD, "hash_ids", "a", "'hash_ids' must be a list of integers"),
    (STEPAHEAD, "hash_ids", ["1"], "'hash_ids' must be a list of integers"),
    (STEPAHEAD, "tenant", 7, "'tenant' must be a string"),
    (STEPAHEAD, "session", ["s"], "'session' must be a string"),
    (STEPAHEAD, "after", 1, "'after' must be a string"),
    (STEPAHEAD, "tool_calls", "ls", "'tool_calls' must be a list of strings"),
    (STEPAHEAD, "tool_calls", [None], "'tool_calls' must be a list of strings"),
    (STEPAHEAD, "messages", "hi", "'messages' must be a list"),
    (STEPAHEAD, "service_tier", True, "'service_tier' must be a string"),
    (STEPAHEAD, "tools", {"type": "function"}, "'tools' must be a list of objects"),
    (STEPAHEAD, "tools", ["get_weather"], "'tools' must be a list of objects"),
    (STEPAHEAD, "tool_choice", 1, "'tool_choice' must be a string or an object"),
    (STEPAHEAD, "tool_choice", ["auto"], "'tool_choice' must be a string or an object"),
])
def test_trace_rejects_a_field_of_the_wrong_type_naming_line_and_field(base, key, value, message):
    import json

    text = json.dumps({**STEPAHEAD, "tenant": "a"}) + "\n" + json.dumps({**base, key: value}) + "\n"
    with pytest.raises(TraceFormatError) as error:
        list(iter_trace(io.StringIO(text))[1])
    assert str(error.value) == f"line 2: {message}"


@pytest.mark.parametrize("header, message", [
    ({"block_size": 0}, "'block_size' must be a positive integer"),
    ({"block_size": "16"}, "'block_size' must be a positive integer"),
    ({"block_size": True}, "'block_size' must be a positive integer"),
    ({"block_size": 10**8}, "'block_size' is 100000000, more than the 10,000,000 tokens a call may have"),
    ({"time_unit": "ms"}, "'time_unit' must be \"s\" (seconds), got 'ms'"),
])
def test_trace_rejects_a_bad_header_naming_the_field(header, message):
    import json

    text = json.dumps({"format": "stepahead-trace/1", **header}) + "\n" + json.dumps(STEPAHEAD) + "\n"
    with pytest.raises(TraceFormatError) as error:
        iter_trace(io.StringIO(text))
    assert str(error.value) == f"line 1: {message}"


def test_trace_optional_fields_may_be_null_and_mean_absent():
    import json

    row = {**STEPAHEAD, "tenant": None, "session": None, "after": None, "tool_calls": None,
           "hash_ids": None, "messages": None, "service_tier": None, "tools": None, "tool_choice": None}
    [record] = iter_trace(io.StringIO(json.dumps(row) + "\n"))[1]
    assert record == TraceRecord(0.5, 5, 8)
    [mooncake] = iter_trace(io.StringIO(json.dumps({**MOONCAKE, "hash_ids": None}) + "\n"))[1]
    assert mooncake == TraceRecord(1.5, 5, 8)
    [no_tokens] = iter_trace(io.StringIO(json.dumps({**MOONCAKE, "input_length": 0, "hash_ids": []}) + "\n"))[1]
    assert no_tokens == TraceRecord(1.5, 0, 8)


def test_trace_checks_an_empty_mooncake_hash_ids_against_the_tokens_too():
    import json

    with pytest.raises(TraceFormatError, match="^line 1: 0 hash_ids for 5 tokens; expected 1 blocks of 512$"):
        list(iter_trace(io.StringIO(json.dumps({**MOONCAKE, "hash_ids": []}) + "\n"))[1])


@pytest.mark.parametrize("lines, message", [
    (['{"t": 0, "input_tokens": 4, "output_tokens": 1}', '{"t": 2.5, "input_tokens": 4, "output_tokens": 1}',
      '{"t": 1, "input_tokens": 4, "output_tokens": 1}'],
     "line 3: 't' is 1 s, before line 2's 2.5 s: a trace's lines are in arrival order"),
    (['{"format": "stepahead-trace/1", "block_size": 16}', '',
      '{"t": 7, "input_tokens": 4, "output_tokens": 1}', '{"t": 6.999, "input_tokens": 4, "output_tokens": 1}'],
     "line 4: 't' is 6.999 s, before line 3's 7 s"),
    (['{"timestamp": 2000, "input_length": 5, "output_length": 8, "hash_ids": [1]}',
      '{"timestamp": 1500, "input_length": 5, "output_length": 8, "hash_ids": [1]}'],
     "line 2: 'timestamp' is 1500 ms, before line 1's 2000 ms"),
])
def test_trace_refuses_a_time_that_goes_back_naming_the_line(lines, message):
    header, records = iter_trace(io.StringIO("\n".join(lines) + "\n"))
    with pytest.raises(TraceFormatError) as error:
        list(records)
    assert str(error.value).startswith(message)


def test_trace_takes_equal_times():
    text = "".join(f'{{"t": {t}, "input_tokens": 4, "output_tokens": 1}}\n' for t in (0, 1, 1, 1, 3))
    assert [r.t for r in iter_trace(io.StringIO(text))[1]] == [0, 1, 1, 1, 3]


def test_trace_block_size_is_a_headerless_traces_and_must_agree_with_a_header():
    line = '{"t": 0, "input_tokens": 40, "output_tokens": 1, "hash_ids": [1, 2, 3]}\n'
    header, records = iter_trace(io.StringIO(line), block_size=16)
    assert header.block_size == 16 and list(records)[0].hash_ids == [1, 2, 3]
    with pytest.raises(TraceFormatError, match="expected 1 blocks of 512"):
        list(iter_trace(io.StringIO(line))[1])          # no header, no block size given: Mooncake's 512
    with_header = '{"format": "stepahead-trace/1", "block_size": 16}\n' + line
    assert iter_trace(io.StringIO(with_header), block_size=16)[0].block_size == 16
    with pytest.raises(BlockSizeConflict,
                       match="^line 1: the header says its hash_ids name blocks of 16 tokens, not 32$"):
        iter_trace(io.StringIO(with_header), block_size=32)   # refused before any record is read


def test_trace_names_a_second_header_plainly():
    """Two exports joined with `cat`: the second header is named as such, not as a line without 't'."""
    header = '{"format": "stepahead-trace/1", "block_size": 16, "time_unit": "s"}'
    line = '{"t": 0, "input_tokens": 40, "output_tokens": 4}'
    with pytest.raises(TraceFormatError, match="^line 4: a second trace header; a header may only be the first line"):
        list(iter_trace(io.StringIO("\n".join([header, line, "", header, line]) + "\n"))[1])
    with pytest.raises(TraceFormatError, match="^line 2: a second trace header"):   # a headerless first part too
        list(iter_trace(io.StringIO("\n".join([line, header, line]) + "\n"))[1])
    extra = '{"t": 1, "input_tokens": 40, "output_tokens": 4, "format": "x"}'   # a request with an extra field
    assert [r.t for r in iter_trace(io.StringIO("\n".join([header, line, extra]) + "\n"))[1]] == [0, 1]


def test_trace_first_line_request_with_an_extra_format_field_is_a_request():
    """As below line 1: a line with request fields is no header, whatever else it carries."""
    extra = '{"t": 1, "input_tokens": 40, "output_tokens": 4, "format": "x"}'
    header, records = iter_trace(io.StringIO(extra + "\n" + extra + "\n"), block_size=16)
    assert header.block_size == 16 and [(r.t, r.input_tokens) for r in records] == [(1, 40), (1, 40)]
    mooncake = '{"timestamp": 0, "input_length": 5, "output_length": 8, "format": "x"}'
    assert [r.t for r in iter_trace(io.StringIO(mooncake + "\n"))[1]] == [0]
