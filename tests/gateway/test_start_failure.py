"""A start that fails for a stated reason is reported in one line, not a traceback."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

from gateway.local_embeddings import EmbeddingModelError
from gateway.start_failure import StartFailed, start_failure_line, stated_start_failures
from shards.model_files import ModelLoadError
from tests.gateway.serving import free_port


def _report_of(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def test_stated_errors_become_start_failed_and_others_keep_their_traceback():
    with pytest.raises(StartFailed, match=r"^model 'm': ModelLoadError: no weights$"):
        with stated_start_failures("model 'm'"):
            raise ModelLoadError("no weights")
    with pytest.raises(StartFailed, match=r"^the trace store: PermissionError: denied$"):
        with stated_start_failures("the trace store"):
            raise PermissionError("denied")
    with pytest.raises(StartFailed, match=r"^model 'm': ModelLoadError: validation error: ValueError: bad size$"):
        with stated_start_failures("model 'm'"):   # one line: the report is read back by lines
            raise ModelLoadError("validation error:\n    ValueError: bad size\n")
    with pytest.raises(StartFailed, match=r"^model 'e': EmbeddingModelError: the tokenizer in /e knows only"):
        with stated_start_failures("model 'e'"):   # QA113: a local embedding model's refusals were a traceback
            raise EmbeddingModelError("the tokenizer in /e knows only its special tokens")
    with pytest.raises(KeyError):   # a bug: its traceback is the report
        with stated_start_failures("model 'm'"):
            raise KeyError("x")


def test_the_reason_is_found_in_the_report_of_a_chained_failure():
    try:
        with stated_start_failures("model 'm'"):
            raise ModelLoadError("the tokenizer in /m could not be loaded")
    except StartFailed as exc:
        report = _report_of(exc)
    assert "The above exception was the direct cause" in report
    assert start_failure_line(report) == "model 'm': ModelLoadError: the tokenizer in /m could not be loaded"
    assert start_failure_line(_report_of(RuntimeError("StartFailed: no"))) is None


def test_serve_reports_a_model_that_fails_to_load_in_one_line(tmp_path: Path):
    from tests.gateway.serving import STORE_ENV

    from shards.tiny_model import build_tiny_tokenizer

    model = tmp_path / "broken-model"
    build_tiny_tokenizer().save_pretrained(model)   # loads in the gateway; the weights fail in the worker
    (model / "config.json").write_text('{"model_type": "llama", "hidden_size": -3}')
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--model", str(model), "--workers", "1",
         "--port", str(free_port())], capture_output=True, text=True, timeout=180,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
             **{name: str(tmp_path / name) for name in STORE_ENV}},
        cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 3, done.stderr[-3000:]
    [line] = [line for line in done.stderr.splitlines() if "the start failed" in line]
    assert ("stepahead: the start failed: model 'broken-model': EngineStartError: worker w0 failed to start: "
            f"ModelLoadError: the model in {model} could not be loaded: ") in line
    assert "hidden size (-3)" in line
    assert "Traceback" not in done.stderr   # neither the gateway's nor the worker's


def test_the_filter_rewrites_only_reports_of_a_stated_failure():
    from gateway.uvicorn_server import StartReports

    class Server:
        start_cancelled_by = None

    try:
        with stated_start_failures("model 'm'"):
            raise ModelLoadError("gone")
    except StartFailed as exc:
        report = _report_of(exc)
    reports = StartReports(Server())
    record = logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, report, (), None)
    assert reports.filter(record) and record.getMessage() == "stepahead: the start failed: model 'm': ModelLoadError: gone"
    other = logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, _report_of(KeyError("x")), (), None)
    assert reports.filter(other) and other.getMessage() == "KeyError: 'x'\n"   # left as it is
