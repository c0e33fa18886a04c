"""The trace store's write side: steps, session summaries, retention.

Only the trace writer thread calls this class (never the request path). Invariants:
- each `write` is one transaction: a session's summary row always matches its steps;
- a session's stored step indexes are unique: a step whose index is already taken (the
  gateway restarted while a client kept its session id) is shifted past the stored ones
  by `index_offset`, which the writer asks for once per session it opens;
- retention removes whole sessions: every one older than `max_age_s`, then, until the
  data fits in `max_bytes`, the biggest tenants' oldest (`store_retention`: a tenant
  within its share keeps its sessions while another floods). Freed pages go back to the
  file system (incremental vacuum);
- a store SQLite finds damaged is set aside, never deleted (`cache.damaged_files`), and
  a new one started at the same path: `surviving_damage` then runs the failed call once
  more on it, so the steps being written are kept;
- a store file deleted or replaced while open (its directory too) is noticed at the next
  write (`reopen_if_gone`, one stat): a new store is started at the path, with a warning,
  instead of writing on into a file no reader can open; a store that cannot be opened is
  tried again at the next call.
"""
from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from agents_trace.records import ForecastCheck, SessionEnded, Step
from agents_trace.store_schema import BUSY_TIMEOUT_MS, connect_writer
from agents_trace.store_retention import trim_biggest_first
from cache.damaged_files import damaged_because, is_damaged_database, set_aside_database, surviving_damage
from cache.sqlite_transaction import transaction

T = TypeVar("T")

log = logging.getLogger("stepahead.agents_trace")
RETENTION_BATCH_SESSIONS = 64


def _file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`; None when there is none (or no directory)."""
    try:
        status = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return status.st_dev, status.st_ino


@dataclass(slots=True)
class StepRow:
    step: Step
    check: ForecastCheck | None
    trace_id: str | None
    span_id: str | None


def _forecast_json(check: ForecastCheck | None) -> str | None:
    if check is None:
        return None
    return json.dumps({"predicted": check.predicted, "p_predicted": check.p_predicted,
                       "actual": check.actual, "is_hit": check.is_hit,
                       "eta_p50_s": check.eta_p50_s, "p_end": check.p_end,
                       "is_confident": check.is_confident})


def _call_rows(calls) -> list[list[str]]:
    return [[c.call_id, c.name, c.arguments] for c in calls]


def _calls_json(calls) -> str:
    return json.dumps(_call_rows(calls), ensure_ascii=False)


def _other_choices_json(choices) -> str:
    """`[[finish_reason, [[call_id, name, arguments], ...]], ...]` for choices 1.."""
    return json.dumps([[c.finish_reason, _call_rows(c.tool_calls)] for c in choices], ensure_ascii=False)


def _prompt_blocks_json(step: Step) -> str | None:
    """The prompt's block fingerprints as a JSON list, or None when the prompt is unknown
    (an upstream model, several prompts, or recording off)."""
    if step.prompt_blocks is None:
        return None
    return json.dumps(list(step.prompt_blocks), separators=(",", ":"))


class TraceStore:
    __slots__ = ("path", "max_age_s", "max_bytes", "num_set_aside", "num_reopened", "_db", "_identity")

    def __init__(self, path: Path, *, max_age_s: float, max_bytes: int) -> None:
        self.path = path
        self.max_age_s = max_age_s
        self.max_bytes = max_bytes
        self.num_set_aside = 0
        self.num_reopened = 0   # times the file was gone or replaced under an open store
        self._db: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None

    def open(self) -> None:
        if self._db is None:   # a file whose schema SQLite finds damaged is set aside here
            self._db = surviving_damage(lambda: connect_writer(self.path), self._move_aside)
            self._identity = _file_identity(self.path)

    def reopen_if_gone(self) -> bool:
        """Start a new store at `path` when the file open here is no longer the one there
        (deleted or replaced while serving); True when it did."""
        if self._db is None or _file_identity(self.path) == self._identity:
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

    def index_offset(self, tenant: str, session: str, first_index: int) -> int:
        """How far to shift a newly opened session's indexes past those already stored."""
        row = self.db.execute("SELECT MAX(idx) FROM steps WHERE tenant = ? AND session = ?",
                              (tenant, session)).fetchone()
        if row[0] is None or row[0] < first_index:
            return 0
        return row[0] + 1 - first_index

    def write(self, rows: Sequence[StepRow], ended: Sequence[SessionEnded]) -> None:
        if not rows and not ended:
            return
        with transaction(self.db, "BEGIN IMMEDIATE") as db:
            for row in rows:
                self._write_step(row)
            for end in ended:
                db.execute("UPDATE sessions SET ended_s = COALESCE(?, last_s), end_reason = ? "
                           "WHERE tenant = ? AND session = ?",
                           (end.last_ended_s, end.reason, end.tenant, end.session))

    def _write_step(self, row: StepRow) -> None:
        step, check = row.step, row.check
        is_error = 1 if step.error is not None else 0
        num_tool_runs = len(step.after.tools)
        has_forecast = 1 if check is not None else 0
        is_hit = 1 if check is not None and check.is_hit else 0
        is_confident = 1 if check is not None and check.is_confident else 0
        self.db.execute(
            "INSERT INTO sessions (tenant, session, agent, source, started_s, last_s, "
            "num_steps, num_errors, num_tool_runs, num_input_tokens, num_cached_tokens, "
            "num_output_tokens, num_forecasts, num_forecast_hits, num_confident_forecasts, "
            "num_confident_forecast_hits, trace_id) "
            "VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (tenant, session) DO UPDATE SET "
            "agent = COALESCE(sessions.agent, excluded.agent), "
            "started_s = MIN(sessions.started_s, excluded.started_s), "
            "last_s = MAX(sessions.last_s, excluded.last_s), ended_s = NULL, end_reason = NULL, "
            "num_steps = sessions.num_steps + 1, "
            "num_errors = sessions.num_errors + excluded.num_errors, "
            "num_tool_runs = sessions.num_tool_runs + excluded.num_tool_runs, "
            "num_input_tokens = sessions.num_input_tokens + excluded.num_input_tokens, "
            "num_cached_tokens = sessions.num_cached_tokens + excluded.num_cached_tokens, "
            "num_output_tokens = sessions.num_output_tokens + excluded.num_output_tokens, "
            "num_forecasts = sessions.num_forecasts + excluded.num_forecasts, "
            "num_forecast_hits = sessions.num_forecast_hits + excluded.num_forecast_hits, "
            "num_confident_forecasts = sessions.num_confident_forecasts + excluded.num_confident_forecasts, "
            "num_confident_forecast_hits = "
            "sessions.num_confident_forecast_hits + excluded.num_confident_forecast_hits, "
            "trace_id = COALESCE(sessions.trace_id, excluded.trace_id)",
            (step.tenant, step.session, step.agent, step.session_source, step.arrived_s,
             step.ended_s, is_error, num_tool_runs, step.num_input_tokens,
             step.num_cached_tokens, step.num_output_tokens, has_forecast, is_hit,
             is_confident, is_confident * is_hit, row.trace_id))
        self.db.execute(
            "INSERT OR REPLACE INTO steps (tenant, session, idx, request_id, response_id, "
            "operation, model, agent, session_source, arrived_s, ended_s, prev_ended_s, gap_s, "
            "after_kind, after_label, after_tools, num_messages, is_stream, num_input_tokens, "
            "num_cached_tokens, num_output_tokens, ttft_s, worker, finish_reason, tool_calls, "
            "error, error_message, forecast, forecast_hit, trace_id, span_id, has_content, other_choices, "
            "prompt_blocks, service_tier) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (step.tenant, step.session, step.index, step.request_id, step.response_id,
             step.operation, step.model, step.agent, step.session_source, step.arrived_s,
             step.ended_s, step.prev_ended_s, step.gap_s, step.after.kind, step.after.label,
             _calls_json(step.after.tools), step.num_messages, int(step.is_stream),
             step.num_input_tokens, step.num_cached_tokens, step.num_output_tokens,
             step.ttft_s, step.worker, step.finish_reason, _calls_json(step.tool_calls),
             step.error, step.error_message, _forecast_json(check),
             None if check is None else int(check.is_hit), row.trace_id, row.span_id,
             int(step.content is not None),
             _other_choices_json(step.other_choices), _prompt_blocks_json(step), step.service_tier))
        if step.content is not None:
            content = step.content
            self.db.execute(
                "INSERT OR REPLACE INTO step_content (tenant, session, idx, "
                "num_prefix_messages, prefix_step, new_messages, output, other_outputs) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (step.tenant, step.session, step.index, content.num_prefix_messages,
                 content.prefix_step,
                 json.dumps(list(content.new_messages), ensure_ascii=False, default=str),
                 None if content.output is None
                 else json.dumps(content.output, ensure_ascii=False, default=str),
                 json.dumps(list(content.other_outputs), ensure_ascii=False, default=str)))

    # --- retention -------------------------------------------------------------------
    def used_bytes(self) -> int:
        page_size = self.db.execute("PRAGMA page_size").fetchone()[0]
        num_pages = self.db.execute("PRAGMA page_count").fetchone()[0]
        num_free = self.db.execute("PRAGMA freelist_count").fetchone()[0]
        return (num_pages - num_free) * page_size

    def _delete_sessions(self, keys: Sequence[tuple[str, str]]) -> None:
        _delete_in_one_transaction(self.db, keys)

    def apply_retention(self, now_s: float) -> int:
        """Drop sessions past the age limit, then the biggest tenants' oldest until the
        data fits."""
        num_removed = 0
        while True:
            old = self.db.execute(
                "SELECT tenant, session FROM sessions WHERE last_s < ? LIMIT ?",
                (now_s - self.max_age_s, RETENTION_BATCH_SESSIONS)).fetchall()
            if not old:
                break
            self._delete_sessions(old)
            num_removed += len(old)
        if self.used_bytes() > self.max_bytes:
            num_removed += trim_biggest_first(self.db, self.used_bytes, self.max_bytes, self._delete_sessions)
        if num_removed:
            self.db.execute("PRAGMA incremental_vacuum")
        return num_removed


def _delete_in_one_transaction(db: sqlite3.Connection, keys: Sequence[tuple[str, str]],
                               begin: str = "BEGIN") -> int:
    """Delete the sessions `keys` ((tenant, session) pairs), their steps and content, all
    or none; the number of steps deleted."""
    with transaction(db, begin):
        deleted = {table: db.executemany(f"DELETE FROM {table} WHERE tenant = ? AND session = ?", keys).rowcount
                   for table in ("step_content", "steps", "sessions")}
    return deleted["steps"]


def delete_sessions(path: Path, keys: Sequence[tuple[str, str]]) -> int:
    """Delete the sessions `keys` from the store at `path`, with their steps and content,
    through a connection of its own (from any thread or process: SQLite orders it with the
    writer's transactions), and give their pages back to the file system; the number of
    steps deleted. A step of such a session still arriving is stored under its id again."""
    db = sqlite3.connect(str(path), isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
    try:
        num_steps = _delete_in_one_transaction(db, keys, "BEGIN IMMEDIATE")
        db.execute("PRAGMA incremental_vacuum").fetchall()   # stepped to the end: every free page
        return num_steps
    finally:
        db.close()
