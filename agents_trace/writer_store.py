"""The trace writer's calls to its store that outlive a failure, and its store upkeep:
ending the sessions other writers left open, retention, the damage check
(agents_trace/writer.py runs them on its thread).

Invariants: a store call that fails (an SQLite or OS error) is counted and logged, at
most once a minute per kind, and gives its default, never stopping the thread; a store
SQLite finds damaged is set aside and the call made again on a new one (store.py); a
session another writer left open is ended once idle past the idle timeout plus a margin
(the same again, at most ABANDONED_MARGIN_S), and its `invoke_agent` span exported.
"""
from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

from agents_trace.spans import record_left_open_session_span
from agents_trace.store import TraceStore
from agents_trace.store_rows import LeftOpenSpan

log = logging.getLogger("stepahead.agents_trace")

ABANDONED_MARGIN_S = 60.0   # at most this past the idle timeout before another writer's open session is ended
DAMAGE_CHECK_INTERVAL_S = 60.0   # a reported damage is checked (O(store size)) at most this often

T = TypeVar("T")


class StoreUpkeep:
    """What `TraceWriter` does with its store beside writing steps. Reads the writer's
    `store`, `stats`, `otel`, `clock`, `idle_timeout_s`, `_open`, `_failures` and
    `_next_damage_check_s`."""

    def _end_abandoned(self) -> None:
        """End in the store the sessions other writers left open (see the module's docstring)."""
        if self.store is None:
            return
        before_s = self.clock() - self.idle_timeout_s - min(self.idle_timeout_s, ABANDONED_MARGIN_S)
        spans: list[LeftOpenSpan] | None = None if self.otel is None else []
        num_ended = self._on_store("ending sessions left open in the trace store",
                                   lambda store: store.end_abandoned(before_s, self._open, spans), 0)
        for left in spans or ():
            record_left_open_session_span(self.otel, left)
        if num_ended:
            self.stats.num_abandoned_ended += num_ended
            log.info("ended %d session(s) left open in the trace store %s since before %.0f s ago "
                     "(a gateway stopped without ending them)", num_ended, self.store.path,
                     self.clock() - before_s)

    def _retain(self) -> None:
        self.stats.num_retention_removed += self._on_store(
            "trace store retention", lambda store: store.apply_retention(self.clock()), 0)

    def _check_store(self) -> None:
        if self.store is not None and time.monotonic() >= self._next_damage_check_s:
            self._next_damage_check_s = time.monotonic() + DAMAGE_CHECK_INTERVAL_S
            self._on_store("checking the trace store", lambda store: store.check_for_damage(), False)

    def _on_store(self, what: str, call: Callable[[TraceStore], T], default: T, *what_args: object) -> T:
        """`call(store)`, surviving a damaged store (store.py); any other error is counted
        and logged (`what`, a %-template of `what_args`, is also its kind of failure),
        and gives `default`."""
        store = self.store
        try:
            return store.surviving_damage(lambda: call(store))
        except (sqlite3.Error, OSError):
            self.stats.num_store_errors += 1
            self._failures.log(what, f"{what} failed", *what_args)
            return default
