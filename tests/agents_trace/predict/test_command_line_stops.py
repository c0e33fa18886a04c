"""`python -m agents_trace.predict.eval` and `python -m agents_trace.predict.timing` end
as `stepahead` and `python -m cache.sim` do (QA221 F1, F2): Ctrl+C stops them with one
line, "PROGRAM: stopped", and exit status 130; a reader of stdout that leaves ends them
quietly with 141. No traceback either way. The module is run as `python -m` runs it
(`runpy`, in this process); one test closes a real pipe."""
from __future__ import annotations

import json
import runpy
import subprocess
import sys
import warnings

import pytest

from cache.stdout_reader import READER_LEFT_EXIT

MODULES = ("agents_trace.predict.eval", "agents_trace.predict.timing")


def _data(tmp_path) -> str:
    path = tmp_path / "seq.jsonl"
    path.write_text("".join(json.dumps({"id": f"s{i}", "domain": "a", "steps": ["USER", "ls", "cat", "ASSISTANT_TEXT"]})
                            + "\n" for i in range(8)))
    return str(path)


def _run_as_python_m(module: str, monkeypatch, *argv: str) -> int | str | None:
    """The exit status `python -m module argv...` ends with; a KeyboardInterrupt or
    BrokenPipeError that escapes (a traceback) fails the test."""
    monkeypatch.setattr(sys, "argv", [module, *argv])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # runpy: the module was imported before
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            return exc.code
        except (KeyboardInterrupt, BrokenPipeError) as exc:
            pytest.fail(f"python -m {module}: {type(exc).__name__} escaped (a traceback)")
    return 0


def _flags(module: str) -> tuple[str, ...]:
    return ("--sessions", "4", "--repeats", "1") if module.endswith("timing") else ("--json",)


@pytest.mark.parametrize("module", MODULES)
def test_ctrl_c_is_one_line_and_status_130(tmp_path, monkeypatch, capsys, module):
    from agents_trace.predict import fit, predictor

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(predictor.Predictor, "fit_sequences", interrupted)   # eval: its first fit
    monkeypatch.setattr(fit, "fit_step_model", interrupted)   # timing: its warm-up fit
    assert _run_as_python_m(module, monkeypatch, "--data", _data(tmp_path), *_flags(module)) == 130
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"python -m {module}: stopped\n"


class _ReaderGone:
    """A stdout whose reader has left: every write fails as a closed pipe's does."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("module", MODULES)
def test_a_reader_that_leaves_ends_it_quietly_with_141(tmp_path, monkeypatch, capsys, module):
    monkeypatch.setattr(sys, "stdout", _ReaderGone())
    assert _run_as_python_m(module, monkeypatch, "--data", _data(tmp_path), *_flags(module)) == READER_LEFT_EXIT
    assert capsys.readouterr().err == ""


def test_a_real_pipe_closed_early(tmp_path):
    """`python -m agents_trace.predict.eval ... --json | true`: status 141, stderr empty."""
    process = subprocess.Popen([sys.executable, "-m", "agents_trace.predict.eval", "--data", _data(tmp_path), "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()   # the reader leaves before the line is written (imports take ~0.5 s)
    _, err = process.communicate(timeout=120)
    assert (process.returncode, err.decode()) == (READER_LEFT_EXIT, "")


class _InterruptedImport:
    """A finder that raises KeyboardInterrupt for one module: Ctrl+C while it loads."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, name, path=None, target=None):
        if name == self.name:
            raise KeyboardInterrupt
        return None


@pytest.mark.parametrize("module", MODULES)
def test_ctrl_c_while_its_modules_load_is_one_line_and_status_130(tmp_path, monkeypatch, capsys, module):
    """QA223 F4: numpy and the predictor take half a second to import, before `main`."""
    monkeypatch.delitem(sys.modules, "agents_trace.predict.predictor")
    monkeypatch.setattr(sys, "meta_path", [_InterruptedImport("agents_trace.predict.predictor"), *sys.meta_path])
    assert _run_as_python_m(module, monkeypatch, "--data", _data(tmp_path), *_flags(module)) == 130
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"python -m {module}: stopped\n"


def test_imported_as_a_library_a_ctrl_c_while_loading_passes_through(monkeypatch):
    monkeypatch.delitem(sys.modules, "agents_trace.predict.predictor")
    monkeypatch.delitem(sys.modules, "agents_trace.predict.eval", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_InterruptedImport("agents_trace.predict.predictor"), *sys.meta_path])
    with pytest.raises(KeyboardInterrupt):
        import agents_trace.predict.eval  # noqa: F401
