"""Failures that repeat, logged without flooding the log.

A full disk fails every trace write (one every 20 ms under load) and every stored
response: a traceback for each would fill the log, and the disk, faster than the
failures themselves. `RepeatedFailures.log` logs the first failure of a kind with its
traceback, only counts the ones that follow within `interval_s`, and logs the first one
after that (with its traceback) saying how many were not logged; `warn` does the same for a
failure told in words (one WARNING line: an upstream's 429).

A failure of one of the `expected` types (a full disk, a file that cannot be written: the
reason is the whole story) is one line, `<message>: <Error>: <reason>`; any other, a bug,
keeps its traceback. `log` logs at ERROR either way: an operation failed and what it was
to do is not done (a trace write's steps are dropped, a response is not archived), whatever
words its message starts with ("stepahead: warning: ...": the serve log's level prefix says
the level once, gateway/log_lines.py); `warn` is for a failure the gateway loses nothing by.

Invariant: of each kind, at most one line per `interval_s`, and every failure is either
logged or counted in the next line logged. NOTE: not thread-safe; one per owning thread.
"""
from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from cache.error_text import one_line_error

DEFAULT_INTERVAL_S = 60.0


@dataclass(slots=True)
class _Kind:
    next_log_s: float
    num_unlogged: int = 0


class RepeatedFailures:
    """Rate-limited `logger.exception` per kind of failure (the module docstring)."""

    __slots__ = ("logger", "interval_s", "clock", "expected", "_kinds")

    def __init__(self, logger: logging.Logger, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic,
                 expected: tuple[type[BaseException], ...] = ()) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.clock = clock
        self.expected = expected   # failures of these types are logged in one line, without a traceback
        self._kinds: dict[str, _Kind] = {}

    def log(self, kind: str, message: str, *args: object) -> None:
        """Log the exception being handled (call in an `except` block) as `message`, or
        count it when one of `kind` was logged less than `interval_s` ago."""
        message = self._due(kind, message)
        if message is None:
            return
        failure = sys.exc_info()[1]
        if failure is not None and isinstance(failure, self.expected):
            self.logger.error(f"{message}: %s", *args, one_line_error(failure))
        else:
            self.logger.exception(message, *args)

    def warn(self, kind: str, message: str, *args: object) -> None:
        """`log` for a failure told in words, not raised here (an upstream's refusal the
        client was answered for): one WARNING line, no traceback, or counted as `log` counts."""
        message = self._due(kind, message)
        if message is not None:
            self.logger.warning(message, *args)

    def _due(self, kind: str, message: str) -> str | None:
        """`message` (with how many of `kind` went unlogged since the last line) when one of
        `kind` may be logged now, the next one then due `interval_s` later; else None, counted."""
        now_s = self.clock()
        state = self._kinds.get(kind)
        if state is not None and now_s < state.next_log_s:
            state.num_unlogged += 1
            return None
        if state is not None and state.num_unlogged:
            message += f" (also {state.num_unlogged} more time(s) since the last report, not logged)"
        self._kinds[kind] = _Kind(now_s + self.interval_s)
        return message
