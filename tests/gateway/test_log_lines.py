"""The product's loggers ("stepahead.*") print under `stepahead serve` as uvicorn's own lines
do, at `--log-level`, once each (gateway/log_lines.py); before, they had no handler: no INFO
line ever, warnings bare through `logging.lastResort`."""
from __future__ import annotations

import io
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

from agents_trace.store import StepRow, TraceStore
from agents_trace.store_queries import find_session
from gateway.log_lines import PRODUCT_LOGGER, LogLinesHandler, shown_log_lines
from tests.agents_trace.test_store_shared_writers import _messages, _step
from tests.gateway.serving import STORE_ENV

LOGGER = "stepahead.tests.log_lines"


def test_info_lines_print_in_uvicorns_style_at_the_level_given():
    stream = io.StringIO()
    with shown_log_lines("info", stream):
        logging.getLogger(LOGGER).info("batch %s runs elsewhere", "b1")
        logging.getLogger(LOGGER).warning("stepahead: warning: kept as logged")
    assert stream.getvalue() == "INFO:     batch b1 runs elsewhere\nWARNING:  stepahead: warning: kept as logged\n"
    stream = io.StringIO()
    with shown_log_lines("warning", stream):
        logging.getLogger(LOGGER).info("not at --log-level warning")
        logging.getLogger(LOGGER).warning("a warning")
    assert stream.getvalue() == "WARNING:  a warning\n"


def test_a_record_prints_once_and_still_reaches_the_root_handlers(caplog):
    """A second set-up replaces the handler; a root handler on the same stream prints the
    record instead of ours; caplog (a root handler of its own stream) sees it too."""
    stream = io.StringIO()
    root_handler = logging.StreamHandler(stream)
    with shown_log_lines("info", stream), shown_log_lines("info", stream) as handler:
        assert [h for h in logging.getLogger(PRODUCT_LOGGER).handlers if isinstance(h, LogLinesHandler)] == [handler]
        logging.getLogger(LOGGER).info("first")
        logging.getLogger().addHandler(root_handler)
        try:
            logging.getLogger(LOGGER).info("second")
        finally:
            logging.getLogger().removeHandler(root_handler)
    assert stream.getvalue() == "INFO:     first\nsecond\n"
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == ["first", "second"]


def test_leaving_removes_the_handler_and_puts_the_level_back_unless_lasting():
    logger = logging.getLogger(PRODUCT_LOGGER)
    found_level, stream = logger.level, io.StringIO()
    with shown_log_lines("debug", stream):
        assert logger.level == logging.DEBUG
    assert logger.level == found_level and not any(isinstance(h, LogLinesHandler) for h in logger.handlers)
    try:
        with shown_log_lines("error", stream, lasting=True) as handler:
            pass
        logging.getLogger(LOGGER).error("said as the process exits")
        assert stream.getvalue() == "ERROR:    said as the process exits\n"
    finally:
        logger.removeHandler(handler)
        logger.setLevel(found_level)


def test_the_loggers_once_named_by_module_sit_under_stepahead():
    """They were "gateway.suffix_tokens" and the like: no handler of "stepahead" covered them."""
    from agents_trace.predict import refit_worker
    from gateway import prompt_token_cache, suffix_tokens
    from shards import probed_costs

    names = [suffix_tokens.logger.name, prompt_token_cache.logger.name, refit_worker._log.name, probed_costs.log.name]
    assert names == ["stepahead.gateway", "stepahead.gateway", "stepahead.agents_trace", "stepahead.shards"]


def test_serve_prints_a_product_info_line_with_uvicorns_prefix_once(tmp_path: Path):
    """`stepahead serve` (--log-level info by default): the trace writer's INFO line for a
    session a dead gateway left open, which its first sweep ends, reaches stderr once as
    `INFO:     ...` (it never printed before)."""
    from gateway.config import key_digest

    store_path = tmp_path / "STEPAHEAD_TRACE_DB"
    dead = TraceStore(store_path, max_age_s=1e9, max_bytes=10**9)
    dead.open()
    dead.write([StepRow(_step(0, time.time() - 5000.0, _messages(1)), None, None, None)], [])   # never ended
    dead.close()
    config = tmp_path / "gw.toml"
    config.write_text("[[models]]\nname = 'mock'\nkind = 'upstream'\nlitellm_model = 'openai/gpt-4o-mini'\n"
                      "litellm_params = { mock_response = 'hi' }\n"
                      f"[[tenants]]\nname = 't'\napi_key_sha256 = ['{key_digest('sk-t')}']\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
             "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
             **{name: str(tmp_path / name) for name in STORE_ENV}})
    try:
        first_line = process.stdout.readline()
        assert first_line.startswith("stepahead: serving on http://127.0.0.1:"), first_line
        deadline = time.monotonic() + 20.0
        while find_session(store_path, "s", "acme")[0]["is_open"] and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err[-3000:]
    said = [line for line in err.splitlines() if "session(s) left open in the trace store" in line]
    assert len(said) == 1, err[-3000:]
    assert said[0].startswith(f"INFO:     ended 1 session(s) left open in the trace store {store_path} since before ")
    assert said[0].endswith(" s ago (a gateway stopped without ending them)")
