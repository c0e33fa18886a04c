"""Every flag of the benchmark scripts (and of `python -m cache.sim` and `stepahead traces
list`) has a help text, and `--help` gives its default; counts of 0 or less are usage
errors (argparse's one line naming the flag, exit status 2) before any model loads or any
gateway starts. QA221 F3: `bench_sampling.py --rounds 0` died in a StatisticsError
traceback, `bench_many_tenants.py --lookups 0` and `bench_detokenizer.py --lengths 0` in
a ZeroDivisionError, `bench_soak.py --every 0` looped for ever and `--concurrency 0` hung.
QA221 F4: 136 flags of the benchmarks had no help text at all.

In process and without subprocesses: the suite is near its time limit."""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import pytest

from agents_trace import traces_command
from benchmarks.script_args import benchmark_parser

ROOT = Path(__file__).resolve().parents[2]
PARSER_FILES = [*sorted((ROOT / "benchmarks").glob("*.py")), ROOT / "cache" / "sim" / "cli.py",
                ROOT / "agents_trace" / "traces_command.py"]


def _flags_without_help(path: Path) -> list[str]:
    missing = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            text = next((k.value for k in node.keywords if k.arg == "help"), None)
            if text is None or (isinstance(text, ast.Constant) and not str(text.value).strip()):
                names = [a.value for a in node.args if isinstance(a, ast.Constant)]
                missing.append(f"{path.relative_to(ROOT)}:{node.lineno} {names[0] if names else '?'}")
    return missing


def test_every_flag_has_a_help_text():
    missing = [flag for path in PARSER_FILES for flag in _flags_without_help(path)]
    assert missing == []


@pytest.mark.parametrize("module, argv, flag", [
    ("bench_sampling", ["--model", "tiny", "--rounds", "0"], "--rounds"),
    ("bench_sampling", ["--model", "tiny", "--rounds", "-1"], "--rounds"),
    ("bench_penalties", ["--rounds", "0"], "--rounds"),
    ("bench_reply_collection", ["--repeats", "0"], "--repeats"),
    ("bench_event_batches", ["--rounds", "0"], "--rounds"),
    ("bench_many_tenants", ["--tenants", "10", "--lookups", "0"], "--lookups"),
    ("bench_many_tenants", ["--tenants", "0"], "--tenants"),
    ("bench_detokenizer", ["--model", "tiny", "--lengths", "0"], "--lengths"),
    ("bench_soak", ["--warmup", "0", "--sessions", "2", "--every", "0", "--tracing", "off"], "--every"),
    ("bench_soak", ["--warmup", "1", "--sessions", "1", "--concurrency", "0", "--tracing", "off"], "--concurrency"),
    ("bench_soak", ["--sessions", "0"], "--sessions"),
])
def test_a_count_of_zero_or_less_is_a_usage_error(monkeypatch, capsys, module, argv, flag):
    parse_args = argparse.ArgumentParser.parse_args

    def parse_or_stop(self, *args, **kwargs):   # accepted flags would start a model or a gateway
        parsed = parse_args(self, *args, **kwargs)
        raise AssertionError(f"{module}.py accepted {argv}: {parsed}")

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_or_stop)
    monkeypatch.setattr(sys, "argv", [f"benchmarks/{module}.py", *argv])
    main = __import__(f"benchmarks.{module}", fromlist=["main"]).main
    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    assert "error:" in last and flag in last


def test_help_gives_each_flags_default_but_none_for_a_switch_or_an_unset_flag():
    parser = benchmark_parser("Measures a thing.\n\nMore.")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds")
    parser.add_argument("--lengths", default=(100, 500), help="reply lengths in tokens")
    parser.add_argument("--model", default="tiny", help="whose weights (default: the tiny one)")
    parser.add_argument("--out", default=None, help="where to write (stdout without it)")
    parser.add_argument("--plot", action="store_true", help="draw it")
    parser.add_argument("--share", type=float, default=0.5, help="100%% of it")
    text = " ".join(parser.format_help().split())
    assert "Measures a thing." in text and "More." not in text
    assert "timed rounds (default: 5)" in text
    assert "reply lengths in tokens (default: 100,500)" in text
    assert "whose weights (default: the tiny one) " in text   # not given twice
    assert "stdout without it) " in text and "None" not in text
    assert "draw it " in text and "False" not in text
    assert "100% of it (default: 0.5)" in text


def test_traces_list_help_gives_the_offsets_default():
    parser = argparse.ArgumentParser(prog="stepahead")
    traces_command.register(parser.add_subparsers())
    traces = parser._subparsers._group_actions[0].choices["traces"]
    listing = traces._subparsers._group_actions[0].choices["list"]
    text = " ".join(listing.format_help().split())
    assert "(default 0)" in text.split("--offset OFFSET", 2)[2].split("--json")[0]


def test_a_script_run_by_path_imports_only_what_its_own_sys_path_finds():
    """A script that puts only benchmarks/ on sys.path (those run against other source
    trees: bench_gateway_cpu, ...) cannot import the `benchmarks` package: run by path
    from anywhere, `from benchmarks.script_args import ...` failed there."""
    wrong = []
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        only_its_folder = "sys.path.insert(0, str(Path(__file__).resolve().parent))" in text
        if only_its_folder and "from benchmarks." in text:
            wrong.append(path.name)
    assert wrong == []
