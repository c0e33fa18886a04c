"""The trace store's write side: steps, session summaries, retention.

Only the trace writer thread calls this class (never the request path). Invariants:
- each `write` is one transaction: a session's summary row always matches its steps;
- a session's stored step indexes are unique and no step replaces another: the writer
  shifts a session it opens past the steps stored already (`index_offset`: a restart, or
  another gateway writing the same session to this store); a step whose index another
  writer has taken since is stored after the session's last one (MAX(idx) + 1, decided in
  the write transaction, so two writers never pick the same), and `write` says where each
  step went, so the writer moves its numbering on (writer.py);
- a writer's end of a session leaves it open where another writer stored a step after the
  last one it saw (one session served by two gateways, one stopping);
- a session no writer ends is ended by any writer's sweep (`end_abandoned`), so one left
  open by a gateway that died (SIGKILL, OOM) does not stay open forever; the sweep is
  handed, in the same transaction, the `invoke_agent` span the dead writer never ended
  (its ids, start and totals: store_rows.py), once: ending clears its ids;
- retention removes whole sessions: every one older than `max_age_s`, then, until the
  data fits in `max_bytes`, the oldest of the tenants storing the most bytes
  (`store_retention`: a tenant within its share keeps its sessions while another floods;
  each write adds its rows' bytes to their session's `num_bytes`; a pass first counts the
  steps an older version's writer stored, uncounted, beside this one). Freed pages go back to the
  file system (incremental vacuum), and the WAL those deletes and page moves went through
  is checkpointed into the file and cut to nothing (`truncate_wal`): `max_bytes` bounds
  the store on disk (file + WAL) once that is done. It waits `WAL_TRUNCATE_WAIT_MS` at
  most, never holding writers back longer; one that a reader of an older snapshot holds
  off is tried again at the next pass. Between passes the WAL adds what was written since
  SQLite's last automatic checkpoint (about 1,000 pages), and one a write restarts is
  cut back to `WAL_KEPT_BYTES` (`journal_size_limit`);
- a store SQLite finds damaged is set aside, never deleted (`cache.damaged_files`), and
  a new one started at the same path: `surviving_damage` then runs the failed call once
  more on it, so the steps being written are kept;
- a store file deleted or replaced while open (its directory too) is noticed at the next
  write (`reopen_if_gone`, one stat): a new store is started at the path, with a warning,
  instead of writing on into a file no reader can open; a store that cannot be opened is
  tried again at the next call.
"""
from __future__ import annotations

import dataclasses
import logging
import sqlite3
from collections.abc import Callable, Container, Sequence
from pathlib import Path
from typing import TypeVar

from agents_trace.content_rows import REPLACE_CONTENT, content_row
from agents_trace.records import SessionEnded
from agents_trace.step_numbering import offset_past
from agents_trace.store_delete import WAL_TRUNCATE_WAIT_MS, delete_in_one_transaction
from agents_trace.store_schema import connect_writer, give_back_free_pages, truncate_wal
from agents_trace.store_rows import CLEAR_ENDED_SPAN, GENERATED_NOTHING, INSERT_STEP, SELECT_LEFT_OPEN_SPAN, \
    UPSERT_SESSION, LeftOpenSpan, StepRow, left_open_span, session_values, step_values
from agents_trace.store_retention import charged_bytes, recount_uncounted, trim_biggest_first
from cache.damaged_files import damaged_because, file_identity, is_damaged_database, set_aside_database, \
    surviving_damage
from cache.sqlite_transaction import transaction

T = TypeVar("T")

log = logging.getLogger("stepahead.agents_trace")
RETENTION_BATCH_SESSIONS = 64
WAL_KEPT_BYTES = 4 << 20      # journal_size_limit: a WAL a write restarts is cut back to this
ABANDONED_BATCH_SESSIONS = 512   # sessions `end_abandoned` ends in one call (one transaction)
_Moved = dict[tuple[str, str, int], int]   # (tenant, session, index asked for) -> index given, in one write


class TraceStore:
    __slots__ = ("path", "max_age_s", "max_bytes", "gateway_started_s", "num_set_aside", "num_reopened", "_db",
                 "_num_opened", "_identity", "_wal_to_truncate")

    def __init__(self, path: Path, *, max_age_s: float, max_bytes: int,
                 gateway_started_s: float | None = None) -> None:
        self.path = path
        self.max_age_s = max_age_s
        self.max_bytes = max_bytes
        self.gateway_started_s = gateway_started_s   # kept on each step: store_schema.py
        self.num_set_aside = 0
        self.num_reopened = 0   # times the file was gone or replaced under an open store
        self._db: sqlite3.Connection | None = None
        self._num_opened = 0   # connections opened: a data_version means something within one only
        self._identity: tuple[int, int] | None = None
        self._wal_to_truncate = False   # a retention pass removed data; its WAL is not cut yet

    def open(self) -> None:
        if self._db is None:   # a file whose schema SQLite finds damaged is set aside here
            self._db = surviving_damage(lambda: connect_writer(self.path), self._move_aside)
            self._num_opened += 1
            self._db.execute(f"PRAGMA journal_size_limit = {WAL_KEPT_BYTES}")
            self._identity = file_identity(self.path)

    def reopen_if_gone(self) -> bool:
        """Start a new store at `path` when the file open here is no longer the one there
        (deleted or replaced while serving); True when it did."""
        if self._db is None or file_identity(self.path) == self._identity:
            return False
        log.warning("the trace store %s was deleted or replaced while open; a new one is started there "
                    "(steps written to the old file since are in it, if it was kept)", self.path)
        self.close()
        self.num_reopened += 1
        self.open()
        return True

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # --- damage ----------------------------------------------------------------------
    def surviving_damage(self, operation: Callable[[], T]) -> T:
        """`operation()`; when SQLite finds the file damaged, the store is set aside, a
        new one started, and `operation` run once more on it."""
        return surviving_damage(operation, self.set_aside_damaged)

    def check_for_damage(self) -> bool:
        """Set the store aside when SQLite's quick check (every page, O(size)) finds it
        damaged; True when it did."""
        try:
            verdict = self.db.execute("PRAGMA quick_check(1)").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            if not is_damaged_database(exc):
                raise
            verdict = str(exc)
        if verdict == "ok":
            return False
        self.set_aside_damaged(damaged_because(verdict))
        return True

    def set_aside_damaged(self, why: str) -> None:
        """Move the file (with its -wal and -shm) aside, once closed, and start a new
        store there."""
        self.close()
        self._move_aside(why)
        self.open()

    def _move_aside(self, why: str) -> None:
        set_aside_database(self.path, "the trace store", why)
        self.num_set_aside += 1

    @property
    def db(self) -> sqlite3.Connection:
        """The writer connection, opened again when an earlier opening failed (raises its
        sqlite3.Error or OSError while it cannot be)."""
        if self._db is None:
            self.open()
        return self._db

    def last_step(self, tenant: str, session: str) -> tuple[int, float | None] | None:
        """The index of the session's last stored step (its highest) and the end of its last
        response (the latest stored step that generated something: one that failed without
        generating anything, as export's `is_left_out` tells, is no response, so a retry's
        gap runs from the reply before it; None when no step did); None when none is
        stored. One primary-key lookup, when a writer opens a session (a second one after
        a failed step)."""
        row = self.db.execute(f"SELECT idx, ended_s, {GENERATED_NOTHING} FROM steps WHERE tenant = ? AND session = ? "
                              "ORDER BY idx DESC LIMIT 1", (tenant, session)).fetchone()
        if row is None or not row[2]:
            return None if row is None else (row[0], row[1])
        response = self.db.execute(f"SELECT ended_s FROM steps WHERE tenant = ? AND session = ? AND NOT "
                                   f"{GENERATED_NOTHING} ORDER BY idx DESC LIMIT 1", (tenant, session)).fetchone()
        return row[0], None if response is None else response[0]

    def index_offset(self, tenant: str, session: str, first_index: int) -> int:
        """How far to shift a newly opened session's indexes past those already stored."""
        return offset_past(self.last_step(tenant, session), first_index)

    def write(self, rows: Sequence[StepRow], ended: Sequence[SessionEnded],
              ended_spans: Sequence[tuple[str, str, str]] = (), moved_before: _Moved | None = None) -> list[int]:
        """Store `rows` and `ended` in one transaction; the index each row was stored
        under, in order: its own (`step.index`), or, where the session has a step there
        already (another writer of this store took it), the session's next (MAX(idx) + 1).
        `ended_spans`: (tenant, session, span id) of the `invoke_agent` spans the caller
        ended, which the store then no longer names (the sessions' ends may not apply).
        `moved_before`: the rows moved by the earlier writes of one batch written in parts
        (writer_batches.py), which a row's `prefix_in_batch` may name; it gains this
        write's once committed."""
        if not rows and not ended:
            return []
        with transaction(self.db, "BEGIN IMMEDIATE") as db:
            moved: _Moved = dict(moved_before or {})
            placed = [self._write_step(row, moved) for row in rows]
            for end in ended:
                db.execute("UPDATE sessions SET ended_s = COALESCE(?, last_s), end_reason = ? "
                           "WHERE tenant = ? AND session = ? AND (? IS NULL OR last_s <= ?)",   # none since
                           (end.last_ended_s, end.reason, end.tenant, end.session, end.last_ended_s,
                            end.last_ended_s))
            if ended_spans:
                db.executemany(CLEAR_ENDED_SPAN, ended_spans)
        if moved_before is not None:
            moved_before.update(moved)
        return placed

    def end_abandoned(self, before_s: float, held: Container[tuple[str, str]],
                      left_open_spans: list[LeftOpenSpan] | None = None) -> int:
        """End the sessions open in the store whose last step ended before `before_s`,
        but those in `held` (the caller's own open sessions): those of a gateway killed
        before ending them. Decided in the store, not when reading, so every reader sees
        the same end without knowing the writers' timeouts; with different timeouts on one
        store the shortest decides, and a gateway with a longer one, or a step running
        longer on another, opens the session again with its next step. As an idle end records them
        (`idle`, ended at their last step); how many (at most ABANDONED_BATCH_SESSIONS, the
        rest at the next call). A step written since (`last_s` moved on) keeps its session
        open. O(log n + open sessions older than `before_s`): the partial index on open
        sessions (store_schema.py). `left_open_spans`, when given, gains (once the ends are
        committed) the `invoke_agent` span each ended session's store row names: one its
        writer never ended, so never exported; ending clears the ids, so none is handed twice."""
        keys: list[tuple[str, str, float]] = []
        cursor = self.db.execute("SELECT tenant, session FROM sessions WHERE ended_s IS NULL AND last_s < ?",
                                 (before_s,))
        try:
            for key in cursor:
                if key not in held:
                    keys.append((*key, before_s))
                    if len(keys) >= ABANDONED_BATCH_SESSIONS:
                        break
        finally:
            cursor.close()
        if not keys:
            return 0
        with transaction(self.db, "BEGIN IMMEDIATE") as db:   # read and ended under one write lock
            spans = [] if left_open_spans is None else [
                left_open_span(row) for key in keys
                if (row := db.execute(SELECT_LEFT_OPEN_SPAN, key).fetchone()) is not None]
            num_ended = db.executemany("UPDATE sessions SET ended_s = last_s, end_reason = 'idle', "
                                       "span_trace_id = NULL, span_id = NULL, span_parent_id = NULL "
                                       "WHERE tenant = ? AND session = ? AND ended_s IS NULL AND last_s < ?",
                                       keys).rowcount
        if left_open_spans is not None:
            left_open_spans.extend(spans)
        return num_ended

    def _write_step(self, row: StepRow, moved: _Moved) -> int:
        """Store one step; the index it was stored under. `moved` (this write's moved
        rows) gains it when it is moved, and names where a moved row of the batch its
        content extends went."""
        step = row.step
        content = step.content
        if row.prefix_in_batch and moved and content is not None:
            prefix = moved.get((step.tenant, step.session, content.prefix_step))
            if prefix is not None:
                content = dataclasses.replace(content, prefix_step=prefix)
        values = step_values(row, has_content=content is not None, gateway_started_s=self.gateway_started_s)
        stored = None if content is None else content_row(self.db, step, content, placed_prefix=row.placed_prefix)
        num_bytes = charged_bytes(values) + (0 if stored is None else charged_bytes(stored))
        self.db.execute(UPSERT_SESSION, session_values(row, num_bytes))
        index = step.index
        if self.db.execute(INSERT_STEP, values).rowcount == 0:   # NOTE: rare, another writer took the index
            index = values[2] = self.db.execute("SELECT MAX(idx) FROM steps WHERE tenant = ? AND session = ?",
                                                (step.tenant, step.session)).fetchone()[0] + 1
            self.db.execute(INSERT_STEP, values)
            moved[(step.tenant, step.session, step.index)] = index
        if stored is not None:
            stored[2] = index
            self.db.execute(REPLACE_CONTENT, stored)
        return index

    def data_version(self) -> tuple[int, int] | None:
        """SQLite's `PRAGMA data_version` of the open connection, with which connection it
        is (a store opened again, set aside or replaced under it, has another: the values of
        two connections never compare, QA207 F1): it changes when another connection commits
        (a gateway sharing the store, a delete); None where it cannot be read (the store not
        open, or failing: the caller reads as if it changed)."""
        if self._db is None:
            return None
        try:
            return self._num_opened, self._db.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error:
            return None

    # --- retention -------------------------------------------------------------------
    def used_bytes(self) -> int:
        """The bytes of the main file's pages in use (its free pages and the WAL not counted)."""
        page_size = self.db.execute("PRAGMA page_size").fetchone()[0]
        num_pages = self.db.execute("PRAGMA page_count").fetchone()[0]
        num_free = self.db.execute("PRAGMA freelist_count").fetchone()[0]
        return (num_pages - num_free) * page_size

    def _delete_sessions(self, keys: Sequence[tuple[str, str]]) -> None:
        delete_in_one_transaction(self.db, keys)

    def apply_retention(self, now_s: float) -> int:
        """Drop sessions past the age limit, count again the sessions an older version's
        writer stored steps in (`recount_uncounted`), then drop the biggest tenants' oldest
        until the data fits; then give the freed pages back and cut the WAL (see the
        module's docstring). The number of sessions dropped."""
        num_removed = 0
        while True:
            old = self.db.execute(
                "SELECT tenant, session FROM sessions WHERE last_s < ? LIMIT ?",
                (now_s - self.max_age_s, RETENTION_BATCH_SESSIONS)).fetchall()
            if not old:
                break
            self._delete_sessions(old)
            num_removed += len(old)
        recount_uncounted(self.db)
        if self.used_bytes() > self.max_bytes:
            num_removed += trim_biggest_first(self.db, self.used_bytes, self.max_bytes, self._delete_sessions)
        if num_removed:
            give_back_free_pages(self.db)
            self._wal_to_truncate = True
        if self._wal_to_truncate:
            self._wal_to_truncate = not truncate_wal(self.db, WAL_TRUNCATE_WAIT_MS)
        return num_removed
