"""The product's log lines under `stepahead serve`, printed as uvicorn prints its own.

`uvicorn.Config` gives handlers to uvicorn's loggers only ("uvicorn", "uvicorn.access"); the
product's ("stepahead" and those under it: "stepahead.gateway", "stepahead.agents_trace",
"stepahead.shards") had none, so their INFO lines were never printed and their warnings came
through `logging.lastResort` as bare messages. `shown_log_lines` gives "stepahead" one stderr
handler with uvicorn's `DefaultFormatter` ("%(levelprefix)s %(message)s": `INFO:     ...`,
colours where uvicorn's own lines have them) at the `--log-level` given.

Invariants, while it is in effect:
- a record of a logger under "stepahead" at or above the level is printed once on stderr: a
  second set-up replaces the handler, never adds another, and a record that a root handler
  prints to the same stream is left to that handler; propagation stays on, so pytest's caplog
  and a user's own root handlers still get every record;
- messages are printed as logged (a "stepahead: warning: ..." line keeps its words);
- importing this module, or `build_app` (tests call it in-process), installs nothing: only
  `stepahead serve` does, after `uvicorn.Config` set uvicorn's logging up. On leaving, the
  handler goes and the logger's level is put back unless `lasting` (the process's last step:
  lines logged while it exits are printed too).
Worker processes (shards/, from the fork server) have no such handler: they log only
warnings and errors, which reach stderr through `logging.lastResort`.
"""
from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

PRODUCT_LOGGER = "stepahead"
LINE_FORMAT = "%(levelprefix)s %(message)s"   # uvicorn's "default" formatter's


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


def line_handler(stream: TextIO) -> LogLinesHandler:
    """A handler printing to `stream` as uvicorn's "default" handler does."""
    from uvicorn.logging import DefaultFormatter

    handler = LogLinesHandler(stream)
    handler.setFormatter(DefaultFormatter(LINE_FORMAT, use_colors=None))   # None: as uvicorn decides
    handler.addFilter(LeftToRoot(stream))
    return handler


@contextmanager
def shown_log_lines(level: str, stream: TextIO | None = None, lasting: bool = False) -> Iterator[LogLinesHandler]:
    """Print the "stepahead" loggers' records at `level` ("info", "warning", ...: a
    `--log-level`) and above on `stream` (default: sys.stderr) within the block."""
    logger = logging.getLogger(PRODUCT_LOGGER)
    found_level = logger.level
    for old in [h for h in logger.handlers if isinstance(h, LogLinesHandler)]:
        logger.removeHandler(old)
    handler = line_handler(sys.stderr if stream is None else stream)
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    try:
        yield handler
    finally:
        if not lasting:
            logger.removeHandler(handler)
            logger.setLevel(found_level)
