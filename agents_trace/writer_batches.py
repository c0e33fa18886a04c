"""The trace writer's store write of one batch: its steps in transactions of at most
WRITE_CHUNK_STEPS (writer_held.py), held while another connection keeps the store locked.

Invariants: the rows go in queue order, the held ones first, each part its own
transaction, the session ends and ended spans with the last (after their steps); each
open session learns where its written steps went (`OpenSession.place`) part by part, and
a later part's row whose content extends a moved row of an earlier part still names
where that row went (`HeldBatch.moved`). A part that finds the store busy leaves it and
the rest held (numbering kept: `_batch`, `_pending`), the parts before it written; one
that fails otherwise, or is busy past the bound or at the stop, drops it and the rest:
one failed write, and each of its steps, counted (writer_stats.py). `_store_busy` says
whether the last try at the store found it locked, until a write succeeds (or a probe
finds it free: writer_store.py), so the store upkeep waits meanwhile.
"""
from __future__ import annotations

import logging
import sqlite3
import time

from agents_trace.records import SessionEnded
from agents_trace.store_rows import StepRow
from agents_trace.store_locks import let_waiters_in
from agents_trace.writer_held import WRITE_CHUNK_STEPS

log = logging.getLogger("stepahead.agents_trace")


class BatchWrites:
    """`TraceWriter`'s writes. Reads and sets the writer's `store`, `stats`, `_held`,
    `_batch`, `_pending`, `_ended_spans`, `_open`, `_store_busy`, `max_held_steps`,
    `_failures`, and calls its `_on_store` (writer_store.py)."""

    def _write(self, rows: list[StepRow], ended: list[SessionEnded], is_final: bool = False) -> bool:
        """Store the held batch and this one, in order (see the module's docstring). False
        when the store was busy and what is left is held to be tried again; True once
        written, or dropped (counted and logged)."""
        held = self._held
        rows, ended = held.rows + rows, held.ended + ended
        if self.store is None or not (rows or ended):
            self._batch, self._pending, self._ended_spans = [], {}, []
            return True
        what = "dropped %d step(s): writing them to the trace store"   # a failure here drops them (QA199 F5)
        self._on_store("reopening the trace store", lambda store: store.reopen_if_gone(), False)
        is_placing = len(self._batch) == len(rows)   # else rows made elsewhere: nothing to place
        # a later part's rows may extend an earlier part's moved ones: the store follows them
        in_parts = {"moved_before": held.moved} if len(rows) > WRITE_CHUNK_STEPS or held.moved else {}
        done = 0
        while True:
            end = min(len(rows), done + WRITE_CHUNK_STEPS)
            part, is_last = rows[done:end], end == len(rows)
            began_s = time.monotonic()
            try:
                placed = self._on_store(what, lambda store: store.write(
                    part, ended if is_last else (), self._ended_spans if is_last else (), **in_parts),
                    None, len(rows) - done, raises_busy=True)
            except sqlite3.OperationalError as exc:   # busy: any other failure gave None
                self.stats.num_store_busy += 1
                self._store_busy = True
                if not is_final and len(rows) - done <= self.max_held_steps:
                    if is_placing:
                        self._batch = self._batch[done:]
                    self._hold(rows[done:], ended, exc)
                    return False
                self.stats.num_store_errors += 1
                self._failures.log(what, f"stepahead: warning: {what} failed", len(rows) - done)
                placed = None
            if placed is None:   # not written: the failure is counted and logged, and so are its steps
                self.stats.num_store_dropped_steps += len(rows) - done
                break
            self._store_busy = False
            if is_placing and len(placed) == len(part):
                for (key, own_index), row, index in zip(self._batch[done:end], part, placed):
                    session = self._open.get(key)
                    if session is not None:
                        session.place(own_index, row.step.index, index, row.step)
            if held.is_held:
                held.num_written += len(part)
            done = end
            if is_last:
                break
            let_waiters_in(time.monotonic() - began_s)   # a connection waiting for the lock gets it in between
        if held.is_held and placed is not None:
            log.info("wrote %d step(s) held while the trace store was locked, %.1f s after it first was",
                     held.num_written, time.monotonic() - held.busy_since_s)
        self._batch, self._pending, self._ended_spans = [], {}, []
        self.stats.num_held_steps = 0
        return True

    def _hold(self, rows: list[StepRow], ended: list[SessionEnded], busy: sqlite3.OperationalError) -> None:
        """Keep `rows` and `ended` (and the batch's numbering) for the next write; warn once
        an episode."""
        held = self._held
        if not held.is_held:
            held.busy_since_s = time.monotonic()
            self.stats.num_store_busy_episodes += 1
            log.warning("stepahead: warning: the trace store %s is locked by another connection (%s); holding "
                        "%d step(s) to write once it is free, at most %d", self.store.path, busy, len(rows),
                        self.max_held_steps)
        held.rows, held.ended = rows, ended
        self.stats.num_held_steps = len(rows)
