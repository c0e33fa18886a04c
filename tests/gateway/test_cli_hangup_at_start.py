"""A SIGHUP during `stepahead serve`'s first second (the command line's imports, before
`serve` counts SIGHUP) no longer kills the gateway silently with status 129 (QA190 F3);
any other command keeps SIGHUP's default action, and `main([...])` in a process that goes
on leaves SIGHUP's handler as it found it."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the command line as the `stepahead` command runs it (`main()`), held inside `main`'s
# imports (its parser's) until the parent, told so, sent SIGHUP and then a line
HELD_IN_MAIN = """
import sys
import gateway.cli as cli
real = cli.build_parser
def build_parser():
    print("in main", flush=True)
    sys.stdin.readline()
    return real()
cli.build_parser = build_parser
sys.argv = ["stepahead", *sys.argv[1:]]
sys.exit(cli.main())
"""


def _hangup_inside_main(tmp_path: Path, *words: str) -> tuple[int, str]:
    process = subprocess.Popen([sys.executable, "-c", HELD_IN_MAIN, *words], cwd=tmp_path, text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(ROOT),
                                    "XDG_DATA_HOME": str(tmp_path), "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    try:
        assert process.stdout.readline() == "in main\n"
        process.send_signal(signal.SIGHUP)
        try:
            process.stdin.write("go\n")
            process.stdin.flush()
        except BrokenPipeError:   # it died of the signal
            pass
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, err


def test_a_sighup_right_after_serve_is_launched_does_not_end_it(tmp_path):
    status, err = _hangup_inside_main(tmp_path, "serve", "--config", str(tmp_path / "missing.toml"))
    assert status == 2, (status, err[-2000:])   # it went on to read its config (-1: killed by SIGHUP)
    assert "stepahead: bad config:" in err and "Traceback" not in err


def test_any_other_command_still_ends_on_sighup(tmp_path):
    status, _ = _hangup_inside_main(tmp_path, "traces", "list")
    assert status == -signal.SIGHUP


def test_only_the_serve_command_line_of_the_process_ignores_it(monkeypatch):
    from gateway.cli import hangups_ignored_until_serve

    def own(signum, frame) -> None:
        pass
    cases = ((["stepahead", "serve"], None, signal.SIG_IGN), (["stepahead", "traces", "list"], None, own),
             (["stepahead", "--version"], None, own), (["stepahead", "serve"], ["serve"], own),
             (["pytest"], ["serve", "--port", "0"], own))
    for command_line, argv, left in cases:
        monkeypatch.setattr(sys, "argv", command_line)
        signal.signal(signal.SIGHUP, own)
        try:
            hangups_ignored_until_serve(argv)
            assert signal.getsignal(signal.SIGHUP) == left, (command_line, argv)
        finally:
            signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.mark.parametrize("before", [signal.SIG_DFL, signal.SIG_IGN])
def test_an_in_process_main_leaves_the_handler_it_found_while_it_parses(monkeypatch, before):
    import gateway.cli as cli

    seen = []
    real = cli.build_parser
    monkeypatch.setattr(cli, "build_parser", lambda: seen.append(signal.getsignal(signal.SIGHUP)) or real())
    monkeypatch.setattr(sys, "argv", ["stepahead", "serve"])   # not the command line `main([...])` runs
    signal.signal(signal.SIGHUP, before)
    try:
        assert cli.main(["traces", "--help"]) == 0
    except SystemExit as stop:   # argparse's --help
        assert stop.code == 0
    finally:
        left = signal.getsignal(signal.SIGHUP)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    assert seen == [before] and left == before
