"""`uvicorn --factory gateway.app:build_app` logs as `stepahead serve` does (QA199 F1, F2): a
key in a URL is redacted in uvicorn's access log, the product's lines print in uvicorn's
style at uvicorn's `--log-level`, and a failed start's stated reason is one line."""
from __future__ import annotations

import logging
import signal

import pytest

from agents_trace.otlp_failure_log import ATTRIBUTES_LOGGER, SDK_EXPORT_LOGGERS
from gateway.access_log import ACCESS_LOGGER, QueryRedaction
from gateway.app import build_app
from gateway.log_lines import PRODUCT_LOGGER, LogLinesHandler
from gateway.uvicorn_server import STARTUP_FAILED, CutRequests, StartReports
from tests.gateway.test_serve_command_config_env import MODEL, _tenant

REPORTS = "uvicorn.error"
TOUCHED = (PRODUCT_LOGGER, *SDK_EXPORT_LOGGERS, ATTRIBUTES_LOGGER, ACCESS_LOGGER, REPORTS, "uvicorn", "uvicorn.asgi")


@pytest.fixture
def factory_config(monkeypatch, tmp_path):
    """$STEPAHEAD_CONFIG naming a one-upstream-model (litellm's mock) config; the loggers
    the factory sets up, and SIGHUP's handler (counted from the factory's first step),
    put back afterwards."""
    path = tmp_path / "gw.toml"
    path.write_text(MODEL + _tenant("a", "sk-a"))
    monkeypatch.setenv("STEPAHEAD_CONFIG", str(path))
    loggers = [logging.getLogger(name) for name in TOUCHED]
    found = [(logger, list(logger.handlers), list(logger.filters), logger.level) for logger in loggers]
    for logger in loggers:   # as in a fresh process: none of serve's set-up from another test
        logger.handlers = [h for h in logger.handlers if not isinstance(h, LogLinesHandler)]
        logger.filters = [f for f in logger.filters if not isinstance(f, (QueryRedaction, StartReports, CutRequests))]
    before = signal.getsignal(signal.SIGHUP)
    try:
        yield path
    finally:
        signal.signal(signal.SIGHUP, before)
        for logger, handlers, filters, level in found:
            logger.handlers, logger.filters = handlers, filters
            logger.setLevel(level)


def _access_record(path: str) -> logging.LogRecord:
    """uvicorn's access record of a GET of `path` answered 401."""
    return logging.LogRecord(ACCESS_LOGGER, logging.INFO, __file__, 0, '%s - "%s %s HTTP/%s" %d',
                             ("127.0.0.1:34366", "GET", path, "1.1", 401), None)


def test_the_factory_redacts_keys_in_urls_in_the_access_log_with_one_filter(factory_config):
    """F1: the key was logged in plain text under the factory, redacted under serve. Ours
    is the first filter (litellm's, once imported, rewrites the line again after it)."""
    for _ in range(2):   # again: still one filter
        build_app()
    filters = logging.getLogger(ACCESS_LOGGER).filters
    assert filters and isinstance(filters[0], QueryRedaction)
    assert sum(isinstance(each, QueryRedaction) for each in filters) == 1
    for path, line in (("/v1/models?api_key=sk-beta-SECRET2", '"GET /v1/models?api_key=[redacted] HTTP/1.1"'),
                       ("/v1/models/sk-gamma-SECRET3", '"GET /v1/models/[redacted] HTTP/1.1"')):
        record = _access_record(path)
        assert filters[0].filter(record) and record.getMessage() == f"127.0.0.1:34366 - {line} 401"
        record = _access_record(path)
        assert logging.getLogger(ACCESS_LOGGER).filter(record) and "SECRET" not in record.getMessage()


def test_under_uvicorns_factory_the_product_lines_print_at_its_log_level_and_a_start_failure_is_one_line(
        factory_config, capsys):
    """F2: uvicorn configures its logging (`--log-level warning`), then calls the factory:
    the product's warnings (and the OpenTelemetry SDK's export lines) print once with
    uvicorn's prefix, its INFO lines not; a stated start failure is one line, with no
    "Application startup failed" after it. Set up once however often the factory runs."""
    import uvicorn

    for _ in range(2):
        uvicorn.Config("gateway.app:build_app", factory=True, log_level="warning").load()
    product = logging.getLogger(PRODUCT_LOGGER)
    exporter = logging.getLogger(SDK_EXPORT_LOGGERS[0])
    shown = [h for h in product.handlers if isinstance(h, LogLinesHandler)]
    assert len(shown) == 1 and [h for h in exporter.handlers if isinstance(h, LogLinesHandler)] == shown
    exporter.filters = []   # the once-a-minute filter: another test may have used this minute's line
    capsys.readouterr()
    logging.getLogger("stepahead.gateway").info("not at --log-level warning")
    logging.getLogger("stepahead.gateway").warning("stepahead: batch b1 waits: its tenant 'gamma' is not in the config")
    exporter.warning("Transient error encountered while exporting spans batch, retrying in 0.93s.")
    assert capsys.readouterr().err == ("WARNING:  stepahead: batch b1 waits: its tenant 'gamma' is not in the config\n"
                                       "WARNING:  Transient error encountered while exporting spans batch, retrying "
                                       "in 0.93s.\n")
    reports = logging.getLogger(REPORTS)
    assert sorted(type(f).__name__ for f in reports.filters if isinstance(f, (StartReports, CutRequests))) == [
        "CutRequests", "StartReports"]
    failure = logging.LogRecord(REPORTS, logging.ERROR, __file__, 0, "Traceback (most recent call last):\n  File "
                                "\"x.py\", line 1, in <module>\ngateway.start_failure.StartFailed: the stored "
                                "responses' file /srv/x: NotADirectoryError: [Errno 20] Not a directory", (), None)
    assert reports.filter(failure) and failure.getMessage() == ("stepahead: the start failed: the stored responses' "
                                                                "file /srv/x: NotADirectoryError: [Errno 20] Not a "
                                                                "directory")
    assert not reports.filter(logging.LogRecord(REPORTS, logging.ERROR, __file__, 0, STARTUP_FAILED, (), None))


@pytest.mark.parametrize("use_colors", [True, False])
def test_under_uvicorns_factory_the_product_lines_take_uvicorns_colour_choice(factory_config, capsys, use_colors):
    """QA203 F5: `--use-colors` / `--no-use-colors` colour the product's lines as uvicorn's."""
    import uvicorn

    uvicorn.Config("gateway.app:build_app", factory=True, log_level="warning", use_colors=use_colors).load()
    capsys.readouterr()
    logging.getLogger("stepahead.gateway").warning("a warning")
    line = capsys.readouterr().err
    assert ("\x1b[" in line) is use_colors and line.endswith("a warning\n")
