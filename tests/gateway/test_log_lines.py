"""The product's loggers ("stepahead.*") print under `stepahead serve` as uvicorn's own lines
do, at `--log-level`, once each (gateway/log_lines.py); before, they had no handler: no INFO
line ever, warnings bare through `logging.lastResort`."""
from __future__ import annotations

import io
import logging
import time
from pathlib import Path

from agents_trace.store import StepRow, TraceStore
from agents_trace.store_queries import find_session
from gateway.log_lines import PRODUCT_LOGGER, LogLinesHandler, shown_log_lines
from tests.agents_trace.test_store_shared_writers import _messages, _step
from tests.gateway.serving import served_then_stopped_by_sigterm

LOGGER = "stepahead.tests.log_lines"


def test_info_lines_print_in_uvicorns_style_at_the_level_given():
    stream = io.StringIO()
    with shown_log_lines("info", stream):
        logging.getLogger(LOGGER).info("batch %s runs elsewhere", "b1")
        logging.getLogger(LOGGER).warning("stepahead: warning: kept as logged")
    assert stream.getvalue() == "INFO:     batch b1 runs elsewhere\nWARNING:  stepahead: kept as logged\n"
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
    config = ("[[models]]\nname = 'mock'\nkind = 'upstream'\nlitellm_model = 'openai/gpt-4o-mini'\n"
              "litellm_params = { mock_response = 'hi' }\n"
              f"[[tenants]]\nname = 't'\napi_key_sha256 = ['{key_digest('sk-t')}']\n")

    def session_ended() -> None:   # by the writer's first sweep
        deadline = time.monotonic() + 20.0
        while find_session(store_path, "s", "acme")[0]["is_open"] and time.monotonic() < deadline:
            time.sleep(0.05)

    err = served_then_stopped_by_sigterm(tmp_path, config, before_stop=session_ended)
    said = [line for line in err.splitlines() if "session(s) left open in the trace store" in line]
    assert len(said) == 1, err[-3000:]
    assert said[0].startswith(f"INFO:     ended 1 session(s) left open in the trace store {store_path} since before ")
    assert said[0].endswith(" s ago (a gateway stopped without ending them)")


def test_the_otel_sdk_export_lines_print_with_the_prefix_at_the_level_given(monkeypatch):
    """QA199 F4: the loggers agents_trace/otlp_failure_log.py quiets are not under
    "stepahead": their lines were bare (`logging.lastResort`) at any --log-level."""
    from agents_trace.otlp_failure_log import ATTRIBUTES_LOGGER, SDK_EXPORT_LOGGERS

    for name in (*SDK_EXPORT_LOGGERS, ATTRIBUTES_LOGGER):
        monkeypatch.setattr(logging.getLogger(name), "filters", [])   # once a minute: another test's line
    exporter = logging.getLogger(SDK_EXPORT_LOGGERS[0])
    stream = io.StringIO()
    with shown_log_lines("warning", stream):
        exporter.info("not at --log-level warning")
        exporter.warning("Transient error %s encountered while exporting spans batch", "refused")
        logging.getLogger(ATTRIBUTES_LOGGER).warning("Invalid type dict for attribute 'x' value")
    assert stream.getvalue() == ("WARNING:  Transient error refused encountered while exporting spans batch\n"
                                 "WARNING:  Invalid type dict for attribute 'x' value\n")
    stream = io.StringIO()
    with shown_log_lines("error", stream):
        exporter.warning("hidden at --log-level error")
        exporter.error("Failed to export span batch")
    assert stream.getvalue() == "ERROR:    Failed to export span batch\n"
    assert not any(isinstance(h, LogLinesHandler) for h in exporter.handlers)   # gone on leaving


def test_a_line_says_its_level_once_and_the_record_keeps_its_words(caplog):
    """QA199 F5: `ERROR:    stepahead: warning: ...` and `WARNING:  stepahead: warning: ...`:
    the level prefix says it; the record (caplog, root handlers) keeps the message."""
    from cache.repeated_failures import RepeatedFailures

    stream = io.StringIO()
    failures = RepeatedFailures(logging.getLogger(LOGGER), expected=(OSError,))
    with caplog.at_level("INFO", logger=PRODUCT_LOGGER), shown_log_lines("info", stream):
        logging.getLogger(LOGGER).warning("stepahead: warning: the trace store %s is locked", "t.sqlite3")
        try:
            raise OSError(28, "No space left on device")
        except OSError:
            failures.log("put", "stepahead: warning: the response archive failed to %s", "put")
        logging.getLogger(LOGGER).info("stepahead: a warning: in the middle stays")
    assert stream.getvalue() == (
        "WARNING:  stepahead: the trace store t.sqlite3 is locked\n"
        "ERROR:    stepahead: the response archive failed to put: OSError: [Errno 28] No space left on device\n"
        "INFO:     stepahead: a warning: in the middle stays\n")
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        "stepahead: warning: the trace store t.sqlite3 is locked",
        "stepahead: warning: the response archive failed to put: OSError: [Errno 28] No space left on device",
        "stepahead: a warning: in the middle stays"]


def test_serve_prints_what_is_logged_while_the_app_is_built(monkeypatch, tmp_path, capsys):
    """QA199 F3: the handler came only around `server.run()`: a record logged while the
    app was built (a backend's kv_share warning) bypassed it; one logged after
    `uvicorn.Config` set its logging up still prints once (its dictConfig leaves it)."""
    import uvicorn

    import gateway.app
    from gateway.cli import main
    from tests.gateway.serving import free_port
    from tests.gateway.test_serve_command_config_env import MODEL, _tenant

    path = tmp_path / "gw.toml"
    path.write_text(MODEL + _tenant("a", "sk-a"))
    real_build_app = gateway.app.build_app

    def logging_build_app(*args, **kwargs):
        logging.getLogger(LOGGER).info("said while the app is built")
        logging.getLogger(LOGGER).warning("stepahead: model 'tiny': tenants' kv_share is ignored under policy 'lru'")
        return real_build_app(*args, **kwargs)

    def run(server, sockets=None):
        logging.getLogger(LOGGER).warning("said once uvicorn set its logging up")
        server.started = True

    monkeypatch.setattr(gateway.app, "build_app", logging_build_app)
    monkeypatch.setattr(uvicorn.Server, "run", run)
    assert main(["serve", "--config", str(path), "--port", str(free_port())]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "said" in line or "kv_share" in line]
    assert lines == ["INFO:     said while the app is built",
                     "WARNING:  stepahead: model 'tiny': tenants' kv_share is ignored under policy 'lru'",
                     "WARNING:  said once uvicorn set its logging up"]
    assert not any(isinstance(h, LogLinesHandler) for h in logging.getLogger(PRODUCT_LOGGER).handlers)
