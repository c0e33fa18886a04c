"""cache.sim's up-front checks apply to what the run will do: the tick limit only to
policies that tick (lru and belady never do), and `--plot` in a format whose writer needs
a program that is missing (pgf: LaTeX) is refused before the runs, not after them."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cache.sim.cli import main
from cache.trace_format import TraceHeader, TraceRecord, write_trace


def _long_trace(tmp_path: Path) -> str:
    """Three requests over 10,000,000 s: at the default 0.25 s, 40 M ticks."""
    path = tmp_path / "long.jsonl"
    with open(path, "w", encoding="utf-8") as stream:
        write_trace(stream, [TraceRecord(t=t, input_tokens=32, output_tokens=1, session="s", hash_ids=[1, 2])
                             for t in (0.0, 5e6, 1e7)], TraceHeader(block_size=16))
    return str(path)


@pytest.mark.parametrize("policy", ["lru", "belady", "lru,belady"])
def test_policies_that_never_tick_run_a_trace_too_long_to_tick(tmp_path, capsys, policy) -> None:
    assert main(["--trace", _long_trace(tmp_path), "--hot-blocks", "4", "--policy", policy, "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == policy.count(",") + 1 and all(json.loads(line)["requests"] == 3 for line in lines)


@pytest.mark.parametrize("policy", ["predictive", "lru,ttl"])
def test_a_policy_that_ticks_is_still_refused_a_trace_too_long_to_tick(tmp_path, capsys, policy) -> None:
    """At the default interval the trace's times are what is wrong (one `error:` line);
    an interval passed is a usage error of that flag."""
    trace = _long_trace(tmp_path)
    assert main(["--trace", trace, "--hot-blocks", "4", "--policy", policy, "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == (
        f"error: {trace}: its requests span 1e+07 s, its longest pause 5e+06 s (before request 2 of 3, at t = "
        "5e+06 s): a policy that ticks, every 0.25 s by default, would tick over 10,000,000 times; if a time is "
        "in the wrong unit, fix the trace, else pass --tick-interval-s 1 or more (0: no ticks)\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["--trace", trace, "--hot-blocks", "4", "--policy", policy, "--tick-interval-s", "0.5", "--json"])
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and captured.out == ""
    assert captured.err.splitlines()[-1] == (
        "python -m cache.sim: error: argument --tick-interval-s: 0.5 s makes over 10,000,000 ticks over this "
        "trace: its requests span 1e+07 s, its longest pause 5e+06 s (before request 2 of 3, at t = 5e+06 s) "
        "(at least 1 s, or 0 for none)")


@pytest.mark.skipif(shutil.which("xelatex") is not None, reason="xelatex is here: a .pgf plot can be drawn")
def test_a_plot_format_whose_writer_needs_a_missing_program_is_refused_before_the_runs(tmp_path, capsys) -> None:
    plot = tmp_path / "plot.pgf"
    with pytest.raises(SystemExit) as exit_info:
        main(["--trace", _long_trace(tmp_path), "--hot-blocks", "4", "--json", "--plot", str(plot)])
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and captured.out == ""   # nothing ran
    assert captured.err.splitlines()[-1].startswith(
        f"python -m cache.sim: error: argument --plot: {plot}: cannot draw a '.pgf' file here: 'xelatex' not found")
    assert not plot.exists()


def test_a_plot_format_matplotlib_draws_alone_is_drawn(tmp_path, capsys) -> None:
    plot = tmp_path / "plot.svg"
    assert main(["--trace", _long_trace(tmp_path), "--hot-blocks", "4", "--json", "--plot", str(plot)]) == 0
    assert plot.read_text().lstrip().startswith("<?xml") and json.loads(capsys.readouterr().out)["requests"] == 3


def test_a_trace_whose_time_jumps_to_1e300_is_refused_in_words_a_person_reads(tmp_path, capsys) -> None:
    """No 300-digit number, and no `argument --tick-interval-s:` for a flag never passed:
    the trace's span and the pause that made it lead."""
    trace = tmp_path / "huge.jsonl"
    trace.write_text('{"t": 0, "input_tokens": 10, "output_tokens": 5}\n'
                     '{"t": 1, "input_tokens": 10, "output_tokens": 5}\n'
                     '{"t": 1e300, "input_tokens": 10, "output_tokens": 5}\n')
    assert main(["--trace", str(trace), "--hot-blocks", "10", "--policy", "predictive", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == (
        f"error: {trace}: its requests span 1e+300 s, its longest pause 1e+300 s (before request 3 of 3, at t = "
        "1e+300 s): a policy that ticks, every 0.25 s by default, would tick over 10,000,000 times; if a time is in "
        "the wrong unit, fix the trace, else pass --tick-interval-s 1e+293 or more (0: no ticks)\n")
    assert "argument --tick-interval-s" not in captured.err
