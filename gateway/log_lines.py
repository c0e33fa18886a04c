"""The product's log lines under `stepahead serve` (and `uvicorn --factory`), printed as
uvicorn prints its own.

`uvicorn.Config` gives handlers to uvicorn's loggers only ("uvicorn", "uvicorn.access"); the
product's ("stepahead" and those under it: "stepahead.gateway", "stepahead.agents_trace",
"stepahead.shards") had none, so their INFO lines were never printed and their warnings came
through `logging.lastResort` as bare messages; so did the OpenTelemetry SDK export loggers the
gateway quiets (agents_trace/otlp_failure_log.py `MANAGED_LOGGERS`). `shown_log_lines` gives
each of those loggers (`SHOWN_LOGGERS`) one stderr handler with uvicorn's `DefaultFormatter`
("%(levelprefix)s %(message)s": `INFO:     ...`, colours where uvicorn's own lines have them)
at the `--log-level` given; `install_log_lines` does the same for the rest of the process.

Invariants, while it is in effect:
- a record of a logger under one of SHOWN_LOGGERS at or above the level is printed once on
  stderr: a second set-up replaces the handler, never adds another, and a record that a root
  handler prints to the same stream is left to that handler; propagation stays on, so
  pytest's caplog and a user's own root handlers still get every record;
- a line says its level once: the prefix says it, so a message's leading "stepahead:
  warning: " prints as "stepahead: " (`LineFormatter`); the record itself keeps its words, so
  caplog, root handlers and `logging.lastResort` (no handler here) see them as logged;
- importing this module, or `build_app` called in-process, installs nothing: only `stepahead
  serve` does (from before the app is built to the end of serving) and `build_app` when
  uvicorn's factory calls it (gateway/uvicorn_server.py `set_up_factory_logging`). On leaving
  `shown_log_lines`, the handlers go and the loggers' levels are put back unless `lasting`
  (the process's last step: lines logged while it exits are printed too).
Worker processes (shards/, from the fork server) have no such handler: they log only
warnings and errors, which reach stderr through `logging.lastResort`.
"""
from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from copy import copy
from typing import TextIO

from agents_trace.otlp_failure_log import MANAGED_LOGGERS

PRODUCT_LOGGER = "stepahead"
SHOWN_LOGGERS = (PRODUCT_LOGGER, *MANAGED_LOGGERS)   # the OpenTelemetry SDK's quieted loggers: not under "stepahead"
LINE_FORMAT = "%(levelprefix)s %(message)s"   # uvicorn's "default" formatter's
LEVEL_WORDS = "stepahead: warning: "   # a message's start that the level prefix says already
SAID_AS = "stepahead: "


class LogLinesHandler(logging.StreamHandler):
    """The handler `shown_log_lines` puts on the "stepahead" logger (found by its class)."""


class LeftToRoot(logging.Filter):
    """Passes a record unless a root handler prints it to the same stream already."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(isinstance(handler, logging.StreamHandler) and handler.stream is self.stream
                       and record.levelno >= handler.level for handler in logging.getLogger().handlers)


def said_once(message: str) -> str:
    """`message` as a line whose level prefix says its level: without a leading
    "stepahead: warning: "'s level word ("stepahead: " kept)."""
    return SAID_AS + message[len(LEVEL_WORDS):] if message.startswith(LEVEL_WORDS) else message


def _line_formatter(use_colors: bool | None):
    from uvicorn.logging import DefaultFormatter

    class LineFormatter(DefaultFormatter):
        """uvicorn's "default" formatter, the level said once (`said_once`), on a copy of
        the record: other handlers format the message as logged."""

        def formatMessage(self, record: logging.LogRecord) -> str:
            line = copy(record)
            line.message = said_once(record.message)
            return super().formatMessage(line)

    return LineFormatter(LINE_FORMAT, use_colors=use_colors)


def line_handler(stream: TextIO, use_colors: bool | None = None) -> LogLinesHandler:
    """A handler printing to `stream` as uvicorn's "default" handler does (`use_colors`:
    None, as uvicorn decides by default; or as its `--use-colors` / `--no-use-colors` said)."""
    handler = LogLinesHandler(stream)
    handler.setFormatter(_line_formatter(use_colors))
    handler.addFilter(LeftToRoot(stream))
    return handler


def install_log_lines(level: str | int, stream: TextIO | None = None,
                      use_colors: bool | None = None) -> tuple[LogLinesHandler, dict[str, int]]:
    """Print the records of SHOWN_LOGGERS (and those under them) at `level` ("info",
    "warning", ...: a `--log-level`; or a level number) and above on `stream` (default:
    sys.stderr) from now on, replacing any handler of this module's there. Gives the
    handler and each logger's level found (for `remove_log_lines`)."""
    handler = line_handler(sys.stderr if stream is None else stream, use_colors)
    found_levels = {}
    for name in SHOWN_LOGGERS:
        logger = logging.getLogger(name)
        found_levels[name] = logger.level
        for old in [h for h in logger.handlers if isinstance(h, LogLinesHandler)]:
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(level.upper() if isinstance(level, str) else level)
    return handler, found_levels


def remove_log_lines(handler: LogLinesHandler, found_levels: dict[str, int]) -> None:
    """Undo `install_log_lines`: the handler goes, each logger's level is put back."""
    for name, found_level in found_levels.items():
        logger = logging.getLogger(name)
        logger.removeHandler(handler)
        logger.setLevel(found_level)


@contextmanager
def shown_log_lines(level: str, stream: TextIO | None = None, lasting: bool = False) -> Iterator[LogLinesHandler]:
    """`install_log_lines` within the block (for good when `lasting`)."""
    handler, found_levels = install_log_lines(level, stream)
    try:
        yield handler
    finally:
        if not lasting:
            remove_log_lines(handler, found_levels)
