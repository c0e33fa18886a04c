"""Bad flags of the benchmark scripts are usage errors (argparse's one line naming the
flag, exit status 2) before any model loads or run starts, never a library's traceback;
and `--help` shows whole sentences."""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import bench_flex_sim, bench_prefix_reuse, calibrate_sim, e2e_forecast_stream, pending_tools
from cache.cli_args import ints, names_from, non_negative_float, non_negative_int, positive_int, positive_ints

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.parametrize("script, argv, flag", [
    (bench_prefix_reuse, ["--model", "tiny", "--repeats", "0", "--prefix-lengths", "16"], "--repeats"),
    (bench_prefix_reuse, ["--model", "tiny", "--prefix-lengths", "-5"], "--prefix-lengths"),
    (bench_prefix_reuse, ["--model", "tiny", "--prefix-lengths", "abc"], "--prefix-lengths"),
    (bench_prefix_reuse, ["--model", "tiny", "--prefix-lengths", "16,"], "--prefix-lengths"),
    (bench_prefix_reuse, ["--model", "tiny", "--threads", "-1"], "--threads"),
    (bench_prefix_reuse, ["--model", "/nonexistent/no-such-model", "--prefix-lengths", "16"], "--model"),
    (calibrate_sim, ["--model", "tiny", "--repeats", "0"], "--repeats"),
    (calibrate_sim, ["--model", "tiny", "--lengths", "64,64"], "--lengths"),
    (calibrate_sim, ["--model", "tiny", "--threads", "-2"], "--threads"),
    (bench_flex_sim, ["--hot-blocks", "0"], "--hot-blocks"),
    (bench_flex_sim, ["--hot-blocks", "-10"], "--hot-blocks"),
    (bench_flex_sim, ["--policies", "foo"], "--policies"),
    (bench_flex_sim, ["--batch-per-s", "-1"], "--batch-per-s"),
    (bench_flex_sim, ["--batch-per-s", "1e12"], "--batch-per-s"),   # past the generator's limit
    (bench_flex_sim, ["--sessions", "0"], "--sessions"),
    (pending_tools, ["--hot-blocks", "0"], "--hot-blocks"),
    (pending_tools, ["--seeds", "a,b"], "--seeds"),
    (pending_tools, ["--session-rate", "0"], "--session-rate"),
    (e2e_forecast_stream, ["--hot-blocks", "0"], "--hot-blocks"),
])
def test_a_bad_flag_is_a_usage_error_naming_it(monkeypatch, capsys, script, argv, flag):
    monkeypatch.setattr(sys, "argv", [f"{script.__name__}.py", *argv])
    with pytest.raises(SystemExit) as stop:
        script.main()
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    assert "error:" in last and flag in last
    if script is bench_flex_sim:   # its own flag, not `stepahead workload generate`'s
        assert "--batch-lines-per-s" not in last and "--batch-prompt-tokens" not in last


def test_the_argument_types():
    assert positive_int("3") == 3 and non_negative_int("0") == 0 and non_negative_float("0.5") == 0.5
    assert positive_ints("256, 1024") == (256, 1024) and ints("0,-1") == (0, -1)
    assert names_from(("lru", "belady"), "policy")("belady,lru,belady") == ("belady", "lru")
    for parse, text in ((positive_int, "0"), (positive_int, "1.5"), (non_negative_int, "-1"),
                        (non_negative_float, "nan"), (non_negative_float, "-0.1"), (positive_ints, "1,0"),
                        (ints, "1,,2"), (names_from(("lru",), "policy"), "all")):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)


def test_help_describes_in_whole_sentences():
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_flex_sim.py"), "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    description = " ".join(done.stdout.split("\n\n")[1].split())
    assert description.endswith("`cache.background_blocks`) save?")
    assert "--batch-lines-per-s" not in done.stdout


def test_no_script_describes_itself_by_its_docstrings_first_line():
    cut = [path.name for path in sorted(BENCHMARKS.glob("*.py")) if "__doc__.splitlines()[0]" in path.read_text()]
    assert cut == []


def test_e2e_capacity_run_as_a_script_says_it_is_a_library(tmp_path):
    done = subprocess.run([sys.executable, str(BENCHMARKS / "e2e_capacity.py"), "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("error: e2e_capacity.py is a library of bench_e2e.py")


def test_number_lists_keep_each_number_once_in_the_order_given():
    """QA131: `--hot-blocks 200,200` ran each size twice and `--seeds 1,1` counted one run
    twice in a median, while the policy lists dropped repeats."""
    assert positive_ints("200,100,200") == (200, 100)
    assert ints("1,1,0") == (1, 0)
