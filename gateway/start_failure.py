"""A start that fails for a reason its message states is reported in one line.

A model that cannot load, a worker that failed to start, a file that cannot be opened:
the operator needs the reason, not the traceback that carried it. `stated_start_failures`
turns such an error into `StartFailed("<what>: <Error>: <message>")`; `stepahead serve`
logs that one line in place of uvicorn's traceback (gateway.serve_command). Any other
exception, a bug, keeps its traceback.
"""
from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from cache.error_text import one_line_error
from shards.engine_start import EngineStartError
from shards.model_files import ModelLoadError

STATED_START_FAILURES = (EngineStartError, ModelLoadError, OSError, sqlite3.Error)


class StartFailed(RuntimeError):
    """The gateway could not start; the message says what failed and why."""


@contextmanager
def stated_start_failures(what: str) -> Iterator[None]:
    """Within the block, an error whose message states the reason becomes StartFailed."""
    try:
        yield
    except STATED_START_FAILURES as exc:
        # one line: the report is read back from the last line of uvicorn's traceback
        raise StartFailed(f"{what}: {one_line_error(exc)}") from exc


def start_failure_line(report: str) -> str | None:
    """The reason given by a StartFailed in uvicorn's report of a failed start (the
    traceback's text), or None when the report is not of one."""
    marker = f"{StartFailed.__module__}.{StartFailed.__qualname__}: "
    for line in reversed(report.splitlines()):
        if line.startswith(marker):
            return line[len(marker):]
    return None
