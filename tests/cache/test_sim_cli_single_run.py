"""cache.sim's command line with one run (one policy, one size) and with a reader of its
stdout that goes away: `--plot` is checked and drawn as for several runs, and a closed
pipe ends it quietly with exit status 141, as the `stepahead` commands do."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cache.sim.cli import main
from cache.trace_format import TraceHeader, write_trace
from tests.cache.test_sim import random_records

ROOT = Path(__file__).resolve().parents[2]


def _trace(tmp_path: Path) -> str:
    path = tmp_path / "trace.jsonl"
    with open(path, "w", encoding="utf-8") as stream:
        write_trace(stream, random_records(seed=5, num_requests=20, block_size=16), TraceHeader(block_size=16))
    return str(path)


def test_a_single_run_with_a_bad_plot_suffix_is_refused_before_it_runs(tmp_path, capsys):
    plot = tmp_path / "single.txt"
    with pytest.raises(SystemExit) as exit_info:
        main(["--trace", _trace(tmp_path), "--hot-blocks", "16", "--policy", "lru", "--plot", str(plot)])
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and captured.out == ""   # no JSON line: nothing ran
    assert captured.err.splitlines()[-1].startswith(
        f"python -m cache.sim: error: argument --plot: {plot}: matplotlib cannot draw to a '.txt' file")


def test_a_single_run_prints_its_one_json_line_and_draws_the_plot(tmp_path, capsys):
    plot = tmp_path / "single.png"
    assert main(["--trace", _trace(tmp_path), "--hot-blocks", "16", "--policy", "lru", "--plot", str(plot)]) == 0
    captured = capsys.readouterr()
    [line] = captured.out.splitlines()
    assert json.loads(line)["policy"] == "lru"
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert captured.err.splitlines()[-1] == f"plot: {plot}"


def test_a_reader_of_stdout_that_goes_away_ends_it_with_141_and_no_traceback(tmp_path):
    trace = _trace(tmp_path)
    read_end, write_end = os.pipe()
    os.close(read_end)   # `| true`: gone before the line is written
    try:
        done = subprocess.run([sys.executable, "-m", "cache.sim", "--trace", trace, "--hot-blocks", "16"],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120, cwd=ROOT)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")
