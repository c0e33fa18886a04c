"""Traces the simulator must not hang or crash on (QA202 F1, F2): times so large that a
tick interval is below their float spacing, and lines Python's JSON reader refuses with
something other than a JSONDecodeError."""
from __future__ import annotations

import pytest

from cache.sim.cli import main


@pytest.mark.timeout(60)
@pytest.mark.parametrize("lines, flags", [
    (['{"t": 5e15, "input_tokens": 10, "output_tokens": 5, "hash_ids": [1]}'], []),
    (['{"t": 5e15, "input_tokens": 10, "output_tokens": 5, "hash_ids": [1]}',
      '{"t": 5.000000000000002e15, "input_tokens": 10, "output_tokens": 5, "hash_ids": [1]}'], []),
    (['{"timestamp": 5e18, "input_length": 10, "output_length": 5, "hash_ids": [1]}'], []),
    (['{"t": 1733500000.0, "input_tokens": 10, "output_tokens": 5, "hash_ids": [1]}',
      '{"t": 1733500000.5, "input_tokens": 10, "output_tokens": 5, "hash_ids": [1]}'], ["--tick-interval-s", "1e-7"]),
], ids=["one-line", "one-ulp-apart", "mooncake-ms", "epoch-tiny-interval"])
def test_a_ticking_policy_finishes_a_trace_whose_times_dwarf_the_tick_interval(tmp_path, capsys, lines, flags):
    trace = tmp_path / "big.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    assert main(["--trace", str(trace), "--hot-blocks", "4", "--policy", "predictive,ttl,kvflow", "--json",
                 *flags]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3


@pytest.mark.parametrize("line, said", [
    ('{"t": 0, "input_tokens": ' + "9" * 5000 + ', "output_tokens": 5}', "line 1: not a trace line (a number of over 4,300 digits)\n"),
    ("[" * 200_000 + "]" * 200_000, "line 1: not a trace line (JSON nested too deep)\n"),
], ids=["huge-integer", "deep-nesting"])
def test_a_line_json_reads_only_with_an_error_of_its_own_is_one_error_line(tmp_path, capsys, line, said):
    trace = tmp_path / "bad.jsonl"
    trace.write_text(line + "\n")
    assert main(["--trace", str(trace), "--hot-blocks", "4", "--json"]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", f"error: cannot read {trace}: {said}")
