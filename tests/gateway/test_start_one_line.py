"""What a start says in one line: a start failure with a stated reason is that line alone
(uvicorn's "Application startup failed. Exiting." left out, kept after an unexpected
failure's traceback), and the kv_share warning of a start reads as a reload's does."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import traceback
from pathlib import Path

from gateway.config import LocalModelConfig
from gateway.local import LocalBackend
from gateway.start_failure import StartFailed, stated_start_failures
from gateway.uvicorn_server import STARTUP_FAILED, StartReports
from tests.gateway.serving import free_port

ROOT = Path(__file__).resolve().parents[2]
KV_SHARE_IGNORED = ("stepahead: model 'm': tenants' kv_share is ignored under policy 'lru' (reservations need "
                    'policy = "predictive" in [models.engine])')


class _Server:
    start_cancelled_by = None


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, message, (), None)


def _stated_report() -> str:
    try:
        with stated_start_failures("the trace store"):
            raise PermissionError("denied")
    except StartFailed as exc:
        return "".join(traceback.format_exception(exc))


def test_after_a_stated_reason_uvicorns_exit_line_is_left_out():
    reports = StartReports(_Server())
    stated = _record(_stated_report())
    assert reports.filter(stated) and stated.getMessage() == (
        "stepahead: the start failed: the trace store: PermissionError: denied")
    assert not reports.filter(_record(STARTUP_FAILED))


def test_after_an_unexpected_failure_uvicorns_exit_line_stays():
    reports = StartReports(_Server())
    assert reports.filter(_record("".join(traceback.format_exception(KeyError("x")))))
    assert reports.filter(_record(STARTUP_FAILED))


def test_serve_says_a_start_failure_in_one_error_line(tmp_path):
    (tmp_path / "a-file").write_text("not a directory")
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "STEPAHEAD_TRACE_DB": str(tmp_path / "traces.db"), "STEPAHEAD_PREDICTOR_DIR": str(tmp_path / "pred"),
           "STEPAHEAD_SPENT_TOKENS": str(tmp_path / "spent.json"),
           "STEPAHEAD_RESPONSES_DB": str(tmp_path / "a-file" / "responses.sqlite3")}
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--model", "tiny", "--workers", "1",
                           "--port", str(free_port())], capture_output=True, text=True, timeout=180, env=env,
                          cwd=ROOT)
    assert done.returncode == 3, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and "stepahead: the start failed: the stored responses' file " in errors[0], errors


def test_the_kv_share_warning_of_a_start_has_the_prefix_a_reloads_has(caplog):
    config = LocalModelConfig(name="m", path="tiny", engine_options=(("policy", "lru"),))
    with caplog.at_level(logging.WARNING, logger="stepahead"):
        LocalBackend(config, tenant_kv_shares={"a": 0.25})
    assert [record.getMessage() for record in caplog.records] == [KV_SHARE_IGNORED]
