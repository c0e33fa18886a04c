"""The trace store's SQLite schema and connections.

Invariants: one writer connection (the trace writer thread), any number of short-lived
read-only connections (the viewer API, the CLI); WAL mode lets them run side by side.
A new file is created with incremental auto-vacuum so retention can hand pages back to
the file system. `sessions` holds one summary row per (tenant, session), kept in step with
`steps` by the writer; `step_content` holds message content (opt-in) apart from `steps`,
so listing steps never reads it. `sessions_open_by_last` indexes only the open sessions
(`ended_s IS NULL`), so a writer's sweep finds those left open by a gateway that died
(`TraceStore.end_abandoned`) without reading the ended ones; a writer opening a store made
before it builds it then (once, one pass over the sessions; `CREATE ... IF NOT EXISTS`,
as every table and index here), and SQLite keeps it up to date for every writer, older
versions too. `steps_by_session_agent` holds only the steps that name an agent, so the
`--agent` / `?agent=` filter (a session with any step by that agent: store_queries'
`AGENT_SQL`) is one look-up per session, and a step without one costs its write nothing;
built the same way (one pass over the steps, when a writer first opens an older store).
`steps_by_arrived` and `steps_by_tenant_arrived` order the steps by arrival, every
tenant's and each tenant's, so a time window (store_stats' `since`/`until`, admin or
tenant-scoped) reads the steps in it, not the whole table; built the same way too (QA174's
276k-step store: about 0.8 s, once, in the start before the models load).
A reader of a store no writer has upgraded yet answers the same, only slower. The `span_*` columns of an open session name the `invoke_agent` span its
steps belong to while no writer has ended it (ids in hex, its start, its own steps'
totals: `store_rows.UPSERT_SESSION`), so a gateway ending a session another left open
(`end_abandoned`) can export that span; NULL ids: none to export. A step's
`gateway_started_s` is when the gateway process that wrote it started (its tracer was
made; NULL in rows written before it was kept): a prompt that ended before then was never
in that process's prefix caches (`PreviousPrompt.reuse_in_walk`). Each row keeps its own
writer's, so gateways sharing a store never change each other's figures.
A session's `num_bytes` is what size retention charges its tenant (store_retention.py:
its steps' rows and content, added as each step is written), and `num_counted_steps` how
many of its `num_steps` it counts. An older version's writer sharing the store (a
rollback, a mixed fleet) adds steps without counting them: `num_steps` alone grows, and
the partial index `sessions_uncounted` holds the session (SQLite keeps it for that writer
too). A writer opening the store counts every such session again from its rows, in the
transaction that adds the columns (a store made before them: every session, one pass over
the steps and their content), so no writer sees a column uncounted; each retention pass
does the same first (`store_retention.recount_uncounted`), for an older writer running
beside this one. With none to count, each costs one probe of that index. A writer opening
a store another connection keeps write-locked past the busy timeout waits for it, up to
START_LOCK_WAIT_S in all with one warning, then fails saying so (`StoreLocked`).
"""
from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from agents_trace.store_locks import is_store_busy
from agents_trace.store_retention import UNCOUNTED_SQL, backfill_sql
from cache.damaged_files import connect_setting_aside_damaged
from cache.private_paths import make_private_dirs
from cache.sqlite_file import add_missing_columns, table_columns
from cache.sqlite_transaction import transaction

log = logging.getLogger("stepahead.agents_trace")


class StoreLocked(sqlite3.OperationalError):
    """The store stayed locked by another connection past START_LOCK_WAIT_S at the opening."""

SCHEMA_VERSION = "2"
# Columns added since version 1: a store written by an older version gains them when a
# writer opens it (readers of a store no writer has upgraded yet treat them as empty).
ADDED_COLUMNS = (("steps", "other_choices", "TEXT NOT NULL DEFAULT '[]'"),
                 ("step_content", "other_outputs", "TEXT NOT NULL DEFAULT '[]'"),
                 ("sessions", "num_confident_forecasts", "INTEGER NOT NULL DEFAULT 0"),
                 ("sessions", "num_confident_forecast_hits", "INTEGER NOT NULL DEFAULT 0"),
                 ("steps", "prompt_blocks", "TEXT"),
                 ("steps", "service_tier", "TEXT"),
                 ("steps", "gateway_started_s", "REAL"),
                 *(("sessions", name, kind) for name, kind in (
                     ("span_trace_id", "TEXT"), ("span_id", "TEXT"), ("span_parent_id", "TEXT"),
                     ("span_started_s", "REAL"), ("span_num_steps", "INTEGER NOT NULL DEFAULT 0"),
                     ("span_input_tokens", "INTEGER NOT NULL DEFAULT 0"),
                     ("span_cached_tokens", "INTEGER NOT NULL DEFAULT 0"),
                     ("span_output_tokens", "INTEGER NOT NULL DEFAULT 0"))),
                 ("sessions", "num_bytes", "INTEGER NOT NULL DEFAULT 0"),
                 ("sessions", "num_counted_steps", "INTEGER NOT NULL DEFAULT 0"))
# the writers' bookkeeping of a session's open span: never shown to a reader of the store
SESSION_SPAN_COLUMNS = tuple(name for table, name, _ in ADDED_COLUMNS if name.startswith("span_"))
SESSION_BYTES_COLUMN = "num_bytes"   # the writers' count for size retention (store_retention.py): not shown either
SESSION_COUNTED_STEPS_COLUMN = "num_counted_steps"   # the steps `num_bytes` counts: not shown either
# every column of `sessions` that is the writers' bookkeeping, not the session's: never shown to a reader
WRITER_SESSION_COLUMNS = (*SESSION_SPAN_COLUMNS, SESSION_BYTES_COLUMN, SESSION_COUNTED_STEPS_COLUMN)
BUSY_TIMEOUT_MS = 5000
START_LOCK_WAIT_S = 30.0   # the most a writer opening the store waits for another connection's write lock
GIVE_BACK_STEP_PAGES = 256   # free pages one transaction of `give_back_free_pages` gives back

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    tenant TEXT NOT NULL, session TEXT NOT NULL, agent TEXT, source TEXT NOT NULL,
    started_s REAL NOT NULL, last_s REAL NOT NULL, ended_s REAL, end_reason TEXT,
    num_steps INTEGER NOT NULL DEFAULT 0, num_errors INTEGER NOT NULL DEFAULT 0,
    num_tool_runs INTEGER NOT NULL DEFAULT 0,
    num_input_tokens INTEGER NOT NULL DEFAULT 0, num_cached_tokens INTEGER NOT NULL DEFAULT 0,
    num_output_tokens INTEGER NOT NULL DEFAULT 0,
    num_forecasts INTEGER NOT NULL DEFAULT 0, num_forecast_hits INTEGER NOT NULL DEFAULT 0,
    num_confident_forecasts INTEGER NOT NULL DEFAULT 0,
    num_confident_forecast_hits INTEGER NOT NULL DEFAULT 0,
    trace_id TEXT,
    span_trace_id TEXT, span_id TEXT, span_parent_id TEXT, span_started_s REAL,
    span_num_steps INTEGER NOT NULL DEFAULT 0, span_input_tokens INTEGER NOT NULL DEFAULT 0,
    span_cached_tokens INTEGER NOT NULL DEFAULT 0, span_output_tokens INTEGER NOT NULL DEFAULT 0,
    num_bytes INTEGER NOT NULL DEFAULT 0, num_counted_steps INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, session)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sessions_by_last ON sessions (last_s);
CREATE INDEX IF NOT EXISTS sessions_by_tenant_last ON sessions (tenant, last_s);
CREATE INDEX IF NOT EXISTS sessions_open_by_last ON sessions (last_s) WHERE ended_s IS NULL;
CREATE TABLE IF NOT EXISTS steps (
    tenant TEXT NOT NULL, session TEXT NOT NULL, idx INTEGER NOT NULL,
    request_id TEXT, response_id TEXT, operation TEXT NOT NULL, model TEXT NOT NULL,
    agent TEXT, session_source TEXT NOT NULL,
    arrived_s REAL NOT NULL, ended_s REAL NOT NULL, prev_ended_s REAL, gap_s REAL,
    after_kind TEXT NOT NULL, after_label TEXT NOT NULL, after_tools TEXT NOT NULL,
    num_messages INTEGER NOT NULL, is_stream INTEGER NOT NULL,
    num_input_tokens INTEGER NOT NULL, num_cached_tokens INTEGER NOT NULL,
    num_output_tokens INTEGER NOT NULL, ttft_s REAL, worker TEXT, finish_reason TEXT,
    tool_calls TEXT NOT NULL, error TEXT, error_message TEXT,
    forecast TEXT, forecast_hit INTEGER, trace_id TEXT, span_id TEXT,
    has_content INTEGER NOT NULL DEFAULT 0, other_choices TEXT NOT NULL DEFAULT '[]',
    prompt_blocks TEXT, service_tier TEXT,
    gateway_started_s REAL,
    PRIMARY KEY (tenant, session, idx)
);
CREATE INDEX IF NOT EXISTS steps_by_response_id ON steps (response_id);
CREATE INDEX IF NOT EXISTS steps_by_session_agent ON steps (tenant, session, agent) WHERE agent IS NOT NULL;
CREATE INDEX IF NOT EXISTS steps_by_arrived ON steps (arrived_s);
CREATE INDEX IF NOT EXISTS steps_by_tenant_arrived ON steps (tenant, arrived_s);
CREATE TABLE IF NOT EXISTS step_content (
    tenant TEXT NOT NULL, session TEXT NOT NULL, idx INTEGER NOT NULL,
    num_prefix_messages INTEGER NOT NULL, prefix_step INTEGER,
    new_messages TEXT NOT NULL, output TEXT, other_outputs TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (tenant, session, idx)
);
"""
# made once the sessions have `num_counted_steps` (an older store gains it after SCHEMA runs)
UNCOUNTED_INDEX = f"CREATE INDEX IF NOT EXISTS sessions_uncounted ON sessions (tenant, session) WHERE {UNCOUNTED_SQL}"


def connect_writer(path: Path) -> sqlite3.Connection:
    """Open (creating if needed, private to this user: cache/private_paths.py) the store for
    writing; only the writer thread uses it."""
    make_private_dirs(path.parent)   # the file (so its -wal, -shm): made private by connect_setting_aside_damaged

    def set_up(connection: sqlite3.Connection) -> None:
        is_new = not path.exists() or path.stat().st_size == 0
        connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if is_new:
            connection.execute("PRAGMA auto_vacuum = INCREMENTAL")
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = NORMAL")
        connection.executescript(SCHEMA)
        _waiting_out_a_lock(connection, path, _upgrade)

    return connect_setting_aside_damaged(path, "the trace store", set_up, isolation_level=None,
                                         check_same_thread=False)


def _upgrade(connection: sqlite3.Connection) -> None:
    """Under the write lock: one writer adds the columns and counts."""
    is_counted = SESSION_BYTES_COLUMN in table_columns(connection, "sessions")
    add_missing_columns(connection, ADDED_COLUMNS)
    connection.execute(UNCOUNTED_INDEX)
    # a store made before sessions counted their bytes: every session; else those an
    # older writer stored steps in since (store_retention.py)
    connection.execute(backfill_sql(connection, f" WHERE {UNCOUNTED_SQL}" if is_counted else ""))
    connection.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema', ?)", (SCHEMA_VERSION,))


def _waiting_out_a_lock(connection: sqlite3.Connection, path: Path,
                        work: Callable[[sqlite3.Connection], None]) -> None:
    """`work` in one write transaction; a store another connection keeps locked past the
    busy timeout (a `traces delete`, another gateway's or a `sqlite3` shell's transaction)
    is waited for up to START_LOCK_WAIT_S in all, saying so once, then fails saying it is
    locked (not that the place cannot be written)."""
    try:
        with transaction(connection, "BEGIN IMMEDIATE"):
            work(connection)
        return
    except sqlite3.OperationalError as exc:
        if not is_store_busy(exc):
            raise
    more_ms = max(0, int(START_LOCK_WAIT_S * 1000) - BUSY_TIMEOUT_MS)
    log.warning("stepahead: warning: the trace store %s is locked by another connection (a `traces delete`, another "
                "gateway's or a sqlite3 shell's transaction); waiting for it, %g s at most in all", path,
                START_LOCK_WAIT_S)
    connection.execute(f"PRAGMA busy_timeout = {more_ms}")
    try:
        with transaction(connection, "BEGIN IMMEDIATE"):
            work(connection)
    except sqlite3.OperationalError as exc:
        if not is_store_busy(exc):
            raise
        raise StoreLocked(f"database is locked: another connection has held the store's write lock for "
                          f"{START_LOCK_WAIT_S:g} s (a `traces delete`, another gateway's or a sqlite3 shell's "
                          "transaction); start again once it is free") from exc
    finally:
        connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")


def give_back_free_pages(connection: sqlite3.Connection, step_pages: int = GIVE_BACK_STEP_PAGES) -> None:
    """Give every free page of the store back to the file system (it is made with
    `auto_vacuum = INCREMENTAL`), `step_pages` a transaction, each followed by a PASSIVE
    checkpoint: the next step's write then starts the WAL over (cut back to
    `journal_size_limit`) unless a reader of an older snapshot holds it, so the WAL the page
    moves go through stays near that limit, not the size of what was freed (QA181 F4:
    trimming 302 MB to 50 MB grew it to 254 MB in one transaction that gave all pages
    back). Stops when a step frees nothing (a store made without incremental auto-vacuum).
    NOTE: `execute` steps the pragma once, which frees one page (QA135: deleting 1,556
    sessions left 450 free pages); a script runs it to the end. Call it outside a
    transaction."""
    num_free = connection.execute("PRAGMA freelist_count").fetchone()[0]
    while num_free > 0:
        connection.executescript(f"PRAGMA incremental_vacuum({int(step_pages)});")
        connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        num_free, before = connection.execute("PRAGMA freelist_count").fetchone()[0], num_free
        if num_free >= before:
            break


def truncate_wal(db: sqlite3.Connection, wait_ms: int) -> bool:
    """Checkpoint the whole WAL into the store's file and cut it to 0 bytes; False when it
    could not within `wait_ms` (a reader still on an older snapshot, or a writer's
    transaction, held it off: nothing is lost, the WAL stays as it was). Readers go on
    meanwhile. Call it outside a transaction."""
    db.execute(f"PRAGMA busy_timeout = {int(wait_ms)}")
    try:   # SQLITE_BUSY comes as the row's first column, not as an error
        busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return busy == 0


def connect_reader(path: Path) -> sqlite3.Connection | None:
    """A read-only connection, or None when the store does not exist yet. The path goes
    into the URI percent-escaped (a `#`, `?` or `%` in it named another file). A store in a
    directory this process cannot write (a read-only mount: SQLite cannot make the WAL's
    -shm file there) is opened `immutable`, as a copy that nothing writes."""
    if not path.exists():
        return None
    uri = f"{Path(path).resolve().as_uri()}?mode=ro"
    connection = sqlite3.connect(uri, uri=True, check_same_thread=False)
    connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    try:
        connection.execute("SELECT 1 FROM sqlite_master LIMIT 1")   # opens the file (and its WAL) now
    except sqlite3.OperationalError:
        connection.close()
        if os.access(Path(path).resolve().parent, os.W_OK):
            raise
        connection = sqlite3.connect(f"{uri}&immutable=1", uri=True, check_same_thread=False)
    connection.row_factory = sqlite3.Row
    return connection


def has_column(db: sqlite3.Connection, table: str, column: str) -> bool:
    """Whether the store's `table` has `column` (a reader of a store no writer has upgraded
    yet may lack one of `ADDED_COLUMNS`)."""
    return column in table_columns(db, table)
