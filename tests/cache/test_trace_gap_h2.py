"""`gap_s` (an extension of stepahead-trace/1): the tool run or think time before a
request, read and written by trace_format with the readers' validation, and ignored by the
simulator, which replays open-loop by `t`."""
from __future__ import annotations

import dataclasses
import io
import json

import pytest

from cache.sim.cli import main as sim_main
from cache.trace_format import TraceFormatError, TraceHeader, TraceRecord, iter_trace, parse_record, write_trace
from tests.cache.test_sim import random_records


def test_gap_s_is_written_and_read_back_and_left_out_when_unknown():
    records = [TraceRecord(0.0, 4, 1, session="s"), TraceRecord(2.5, 8, 1, session="s", after="user", gap_s=1.25)]
    stream = io.StringIO()
    write_trace(stream, records, TraceHeader(block_size=4))
    lines = [json.loads(line) for line in stream.getvalue().splitlines()[1:]]
    assert "gap_s" not in lines[0] and lines[1]["gap_s"] == 1.25
    _, read = iter_trace(io.StringIO(stream.getvalue()))
    assert [r.gap_s for r in read] == [None, 1.25]


@pytest.mark.parametrize("value", [-0.5, "1", True, float("nan"), float("inf"), 10**400, [1]])
def test_a_gap_s_that_is_no_finite_non_negative_number_is_refused_naming_the_line(value):
    row = {"t": 1.0, "input_tokens": 4, "output_tokens": 1, "gap_s": value}
    with pytest.raises(TraceFormatError, match=r"line 7: 'gap_s' must be a non-negative number of seconds"):
        parse_record(row, 7, 16)


def test_a_null_or_zero_gap_s_is_accepted():
    assert parse_record({"t": 1, "input_tokens": 4, "output_tokens": 1, "gap_s": None}, 1, 16).gap_s is None
    assert parse_record({"t": 1, "input_tokens": 4, "output_tokens": 1, "gap_s": 0}, 1, 16).gap_s == 0.0


def test_the_simulator_reads_a_trace_with_gap_s_and_gives_the_same_numbers(tmp_path, capsys):
    records = random_records(seed=5, num_requests=30, block_size=16)
    outputs = []
    for name, rows in (("plain", records), ("gaps", [dataclasses.replace(r, gap_s=0.5 * i)
                                                      for i, r in enumerate(records)])):
        path = tmp_path / f"{name}.jsonl"
        with open(path, "w", encoding="utf-8") as stream:
            write_trace(stream, rows, TraceHeader(block_size=16))
        assert sim_main(["--trace", str(path), "--hot-blocks", "16", "--policy", "predictive", "--json"]) == 0
        [line] = capsys.readouterr().out.splitlines()
        outputs.append({key: value for key, value in json.loads(line).items() if key != "wall_s"})
    assert '"gap_s"' in (tmp_path / "gaps.jsonl").read_text()
    assert outputs[0] == outputs[1] and outputs[0]["requests"] == 30
