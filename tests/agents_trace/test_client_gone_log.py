"""A trace-viewer read whose client left is answered 499, which nobody receives and uvicorn
never logs (QA190 F4: an operator could not see a cancelled scan): one line says so, in
the access line's shape and level, its query's secrets redacted, with how long it read;
written only where access lines are, one per request."""
from __future__ import annotations

import logging
import re
import socket
import threading
import time

import pytest

import agents_trace.api as api_module
from agents_trace.api import Viewer
from agents_trace.client_gone import unless_client_leaves

from tests.agents_trace.helpers import session_with_an_eviction, viewer_app

KEYS = {"k-admin": Viewer("ops", is_admin=True)}
ACCESS_LOGGER, SERVER_LOGGER = "uvicorn.access", "uvicorn.error"
UVICORN_LOGGERS = ("uvicorn", SERVER_LOGGER, ACCESS_LOGGER)
SCOPE = {"type": "http", "http_version": "1.1", "method": "GET", "path": "/v1/traces/sessions",
         "raw_path": b"/v1/traces/sessions", "query_string": b"agent_contains=zz&api_key=sk-secret0123456789",
         "client": ("127.0.0.1", 5151)}


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def logs():
    """The server log's records (uvicorn's loggers as `stepahead serve` sets them: INFO,
    an access handler, the gateway's redaction on the access logger); put back after."""
    from gateway.access_log import redact_access_log

    access, server = logging.getLogger(ACCESS_LOGGER), logging.getLogger(SERVER_LOGGER)
    saved = saved_loggers()
    lines = Lines()
    access.handlers, access.propagate = [logging.NullHandler()], False
    for logger in (access, server):   # litellm, once imported by an earlier test, adds its own (they rewrite the query)
        logger.filters = []
    server.handlers, server.propagate = [lines], False
    access.setLevel(logging.INFO)
    server.setLevel(logging.INFO)
    redact_access_log()
    yield lines
    put_back(saved)


def saved_loggers() -> list[tuple]:
    return [(logger, logger.level, list(logger.handlers), list(logger.filters), logger.propagate)
            for logger in map(logging.getLogger, UVICORN_LOGGERS)]


def put_back(saved: list[tuple]) -> None:
    for logger, level, handlers, filters, propagate in saved:
        logger.setLevel(level)
        logger.handlers, logger.filters, logger.propagate = handlers, filters, propagate


def test_the_line_is_the_access_lines_shape_with_its_query_redacted(logs):
    from agents_trace.client_gone import log_client_left

    log_client_left(SCOPE, 0.3141)
    (record,) = logs.records
    assert record.levelno == logging.INFO
    assert record.getMessage() == ('127.0.0.1:5151 - "GET /v1/traces/sessions?agent_contains=zz&api_key=[redacted] '
                                   'HTTP/1.1" 499 (the client left; its read stopped after 0.31 s)')


def test_a_percent_in_the_path_is_no_format(logs):
    from agents_trace.client_gone import log_client_left

    log_client_left({**SCOPE, "raw_path": b"/v1/traces/sessions/a%25s%2Fb", "query_string": b""}, 1.0)
    (record,) = logs.records
    assert '"GET /v1/traces/sessions/a%25s%2Fb HTTP/1.1" 499' in record.getMessage()


def test_none_where_access_lines_are_not_written(logs):
    from agents_trace.client_gone import log_client_left

    access = logging.getLogger(ACCESS_LOGGER)
    access.setLevel(logging.WARNING)   # --log-level warning
    log_client_left(SCOPE, 0.5)
    access.setLevel(logging.INFO)
    access.handlers = []   # uvicorn's access_log=False (--no-access-log)
    log_client_left(SCOPE, 0.5)
    assert logs.records == []


class Stopped(Exception):
    pass


class LeavingRequest:
    """A request whose client has gone: `receive` says so at once."""

    scope = SCOPE

    async def receive(self) -> dict:
        return {"type": "http.disconnect"}


async def test_a_read_that_stops_is_one_line_one_that_ends_or_fails_none(logs):
    def stopping(stop: threading.Event):
        assert stop.wait(10)
        raise Stopped
    answer = await unless_client_leaves(LeavingRequest(), stopping, (Stopped,))
    assert answer.status_code == 499 and len(logs.records) == 1
    assert await unless_client_leaves(LeavingRequest(), lambda stop: "whole", (Stopped,)) == "whole"
    with pytest.raises(ValueError):
        await unless_client_leaves(LeavingRequest(), lambda stop: int("x"), (Stopped,))
    assert len(logs.records) == 1


def test_a_served_read_whose_client_closed_the_connection_is_logged_once(tmp_path, monkeypatch, capfd):
    """Served by uvicorn at --log-level info, as `stepahead serve` sets its log up: the line
    is written once, and uvicorn writes none of its own for the 499."""
    import uvicorn

    from agents_trace.store_queries import ReadCancelled
    from gateway.access_log import redact_access_log
    from tests.gateway.serving import free_port

    path, _ = session_with_an_eviction(tmp_path)
    reading, ended = threading.Event(), threading.Event()

    def held(*args, stop=None, **kwargs):   # the list's read, held until its client left
        reading.set()
        try:
            assert stop is not None and stop.wait(30)
            raise ReadCancelled()
        finally:
            ended.set()
    monkeypatch.setattr(api_module, "list_sessions", held)
    port = free_port()
    saved = saved_loggers()   # (uvicorn's Config sets them up for the whole process)
    server = uvicorn.Server(uvicorn.Config(viewer_app(path, KEYS), host="127.0.0.1", port=port, log_level="info"))
    for name in (ACCESS_LOGGER, SERVER_LOGGER):   # litellm's, if an earlier test imported it (they rewrite the query)
        logging.getLogger(name).filters = []
    redact_access_log()
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive()
            time.sleep(0.02)
        client = socket.create_connection(("127.0.0.1", port))
        client.sendall(b"GET /v1/traces/sessions?token=sk-secret0123456789 HTTP/1.1\r\nhost: t\r\n"
                       b"authorization: Bearer k-admin\r\n\r\n")
        assert reading.wait(30)
        client.close()   # a closed tab
        assert ended.wait(30)
        time.sleep(0.3)   # the answer's (dropped) send and any line of uvicorn's
    finally:
        server.should_exit = True
        thread.join(30)
        put_back(saved)
    out, err = capfd.readouterr()
    lines = [line for line in (out + err).splitlines() if " 499" in line]
    assert len(lines) == 1, out + err
    assert re.fullmatch(r'INFO: +127\.0\.0\.1:\d+ - "GET /v1/traces/sessions\?token=\[redacted\] HTTP/1\.1" 499 '
                        r'\(the client left; its read stopped after \d+\.\d\d s\)', lines[0]), lines[0]
    assert "sk-secret" not in out + err
