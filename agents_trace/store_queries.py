"""The trace store's read side: what the viewer API and the CLI export ask.

Every function opens its own short read-only connection (safe from any thread, never the
writer's; `read_snapshot`: one for a caller's many queries), and takes the tenant scope
explicitly: `tenant` None means "all tenants" and is only passed for an admin. Results
are JSON-ready dicts. Invariant: nothing is cut short silently: lists are pages with
`has_more`, and content comes whole on request; a read given a `stop` event (set when its
client left: agents_trace/client_gone.py) that is set ends within PROGRESS_STEPS SQLite
instructions by raising `ReadCancelled`, never with a part of its answer (on a store of
700,000 steps a filtered session list scans for 0.2-0.7 s, and longer on a store kept
larger than `retention_max_bytes`' default).
"""
from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from agents_trace.session_id_forms import given_id_forms, whole_id_forms
from agents_trace.store_schema import WRITER_SESSION_COLUMNS, connect_reader

MAX_PAGE = 500
PROGRESS_STEPS = 20_000   # SQLite instructions between looks at a read's `stop` (as store_stats)
# `column` holds the text, in any case (ASCII letters: SQLite's lower()); literal text,
# no wildcards. The viewer's filters (`id_contains`, `agent_contains`) match this one way.
def contains_sql(column: str) -> str:
    return f"instr(lower({column}), lower(?)) > 0"


# a session whose id holds the text as given (`contains_sql`) or percent-decoded (an
# answer's `x-session-id` pasted whole: `given_id_forms`; case kept), or one of whose steps
# is the request with that id, exactly (found through the index on steps.response_id)
ID_OR_REQUEST_ID_SQL = (f"({contains_sql('session')} OR instr(session, ?) > 0 OR (tenant, session) IN "
                        "(SELECT tenant, session FROM steps WHERE response_id = ?))")
# a session one of whose steps ran as the agent, whichever (`sessions.agent` is its first
# step's): one look-up per session in the index steps_by_session_agent (store_schema)
AGENT_SQL = ("EXISTS (SELECT 1 FROM steps WHERE steps.tenant = sessions.tenant "
             "AND steps.session = sessions.session AND steps.agent = ?)")
# the same with part of the agent's name (`contains_sql`): its first step's agent (the
# sessions row), else its steps' agents read from that index alone (no step row is read;
# `agent IS NOT NULL` lets SQLite use the partial index), at most one entry per step of
# the sessions a page looks at
AGENT_CONTAINS_SQL = (f"({contains_sql('sessions.agent')} OR EXISTS (SELECT 1 FROM steps "
                      "WHERE steps.tenant = sessions.tenant AND steps.session = sessions.session "
                      f"AND steps.agent IS NOT NULL AND {contains_sql('steps.agent')}))")
# the rows after a row's key (last_s, tenant, session) in the list's order (`list_sessions`)
AFTER_KEY_SQL = "(last_s < ? OR (last_s = ? AND (tenant > ? OR (tenant = ? AND session > ?))))"


@dataclass(frozen=True, slots=True)
class SessionFilter:
    """Which sessions to list. Times are Unix seconds on the session's last activity;
    `agent`: sessions with a step that ran as it (a handoff's later agents too)."""

    tenant: str | None = None
    agent: str | None = None
    since_s: float | None = None
    until_s: float | None = None
    errors_only: bool = False
    # sessions whose id holds this text (in any case: `contains_sql`) or its percent-decoded
    # form (an answer's `x-session-id` pasted: `given_id_forms`, case kept), or that hold a step whose
    # request id (a reply's `x-request-id`: its chatcmpl-, cmpl- or resp_ id) is this text
    id_contains: str | None = None
    # sessions with a step that ran as an agent whose name holds this text, in any case
    agent_contains: str | None = None


class ReadCancelled(Exception):
    """A read stopped before its end because its `stop` was set (its client left)."""


@contextlib.contextmanager
def read_store(path: Path, stop: threading.Event | None = None) -> Iterator[sqlite3.Connection | None]:
    """A short read-only connection for one query (None when the store does not exist yet);
    with `stop`, a query on it ends with `ReadCancelled` soon after `stop` is set, and none
    starts once it is (`ReadCancelled` at once: however short the query)."""
    if stop is not None and stop.is_set():
        raise ReadCancelled()
    connection = connect_reader(path)
    try:
        if connection is not None and stop is not None:
            connection.set_progress_handler(stop.is_set, PROGRESS_STEPS)
        yield connection
    except sqlite3.OperationalError as error:   # the progress handler cut a query short
        if stop is not None and stop.is_set() and "interrupted" in str(error):
            raise ReadCancelled() from None
        raise
    finally:
        if connection is not None:
            connection.close()


@contextlib.contextmanager
def read_snapshot(path: Path) -> Iterator[sqlite3.Connection | None]:
    """`read_store`'s connection in one read transaction: every query on it sees the store
    as its first did (an export of many sessions: one consistent snapshot, one connection).
    The writer goes on meanwhile (WAL), but no checkpoint passes that snapshot: hold it
    for reading only, not while a slow client takes the lines."""
    with read_store(path) as connection:
        if connection is not None:
            connection.execute("BEGIN")   # ended (rolled back: nothing written) when closed
        yield connection


def _session_dict(row: sqlite3.Row) -> dict:
    out = dict(row)
    for column in WRITER_SESSION_COLUMNS:   # the writers' bookkeeping, not the session's
        out.pop(column, None)
    for column in ("num_confident_forecasts", "num_confident_forecast_hits"):
        out.setdefault(column, 0)  # a store no writer has upgraded yet lacks the column
    out["is_open"] = out.pop("ended_s") is None
    out["duration_s"] = out["last_s"] - out["started_s"]
    return out


def where_sql(conditions: Iterable[tuple[str, object]], *fixed: str) -> tuple[str, list]:
    """A WHERE clause (empty when nothing applies) from (clause with one `?`, value) pairs,
    a pair applying when its value is not None (a tuple value fills a clause with as many
    `?`s), and clauses without parameters; with the parameters in order."""
    clauses, params = [], []
    for clause, value in conditions:
        if value is not None:
            clauses.append(clause)
            params.extend(value if isinstance(value, tuple) else (value,))
    clauses.extend(fixed)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


def _where_sql(where: SessionFilter, after: tuple[float, str, str] | None = None) -> tuple[str, list]:
    return where_sql((("tenant = ?", where.tenant), (AGENT_SQL, where.agent),
                      (AGENT_CONTAINS_SQL, None if where.agent_contains is None
                       else (where.agent_contains, where.agent_contains)),
                      ("last_s >= ?", where.since_s), ("started_s <= ?", where.until_s),
                      (ID_OR_REQUEST_ID_SQL, None if where.id_contains is None
                       else (where.id_contains, given_id_forms(where.id_contains)[-1], where.id_contains)),
                      (AFTER_KEY_SQL, None if after is None else (after[0], after[0], after[1], after[1], after[2]))),
                     *(("num_errors > 0",) if where.errors_only else ()))


def list_sessions(path: Path, where: SessionFilter, *, limit: int = 50, offset: int = 0,
                  after: tuple[float, str, str] | None = None, stop: threading.Event | None = None) -> dict:
    """A page of sessions, most recently active first (`last_s`, then tenant and id). With
    `after`, a row's key (last_s, tenant, session), only the rows after it in that order
    (a keyset page: a session active again moves above it, and neither repeats nor pushes
    another out of the pages after it); `offset` counts from there. The filter's tenant
    applies either way. `stop`: `read_store`'s."""
    limit = max(1, min(limit, MAX_PAGE))
    condition, params = _where_sql(where, after)
    sql = "SELECT * FROM sessions" + condition + " ORDER BY last_s DESC, tenant, session LIMIT ? OFFSET ?"
    with read_store(path, stop) as db:
        rows = [] if db is None else db.execute(sql, (*params, limit + 1, max(0, offset))
                                                ).fetchall()
    return {"data": [_session_dict(r) for r in rows[:limit]], "has_more": len(rows) > limit,
            "offset": max(0, offset), "limit": limit}


def matching_session_keys(path: Path, where: SessionFilter,
                          stop: threading.Event | None = None) -> list[tuple[str, str]]:
    """Every (tenant, session) the filter takes, in the order they started: all at once,
    so a writer adding sessions meanwhile cannot shift a page under the caller. `stop`:
    `read_store`'s."""
    condition, params = _where_sql(where)
    with read_store(path, stop) as db:
        rows = [] if db is None else db.execute(
            "SELECT tenant, session FROM sessions" + condition + " ORDER BY started_s, tenant, session",
            params).fetchall()
    return [(row["tenant"], row["session"]) for row in rows]


def _rows_within(path: Path, select: str, value: str, tenant_column: str, tenant: str | None,
                 order: str, stop: threading.Event | None = None) -> list[sqlite3.Row]:
    """The rows of `select` (ending in a WHERE with one `?`, for `value`), within `tenant`
    (every tenant's when None), in `order`; `stop`: `read_store`'s."""
    params = (value,) if tenant is None else (value, tenant)
    sql = select + ("" if tenant is None else f" AND {tenant_column} = ?") + f" ORDER BY {order}"
    with read_store(path, stop) as db:
        return [] if db is None else db.execute(sql, params).fetchall()


# The sessions with one id in every tenant, found through the primary key (tenant, session):
# the tenants are walked one by one, each the least above the last (one index seek each),
# and the id looked up in each; not a scan of every session (2.2 s on 800,000 sessions).
EVERY_TENANT_SESSION_SQL = (
    "WITH RECURSIVE tenants(tenant) AS (SELECT min(tenant) FROM sessions UNION ALL "
    "SELECT (SELECT min(tenant) FROM sessions WHERE tenant > tenants.tenant) FROM tenants "
    "WHERE tenants.tenant IS NOT NULL) "
    "SELECT sessions.* FROM tenants JOIN sessions ON sessions.tenant = tenants.tenant AND sessions.session = ? "
    "ORDER BY sessions.tenant")


def find_session(path: Path, session: str, tenant: str | None, stop: threading.Event | None = None) -> list[dict]:
    """The sessions with this id, within `tenant` (or in every tenant, for an admin: one
    look-up per tenant, `EVERY_TENANT_SESSION_SQL`); `stop`: `read_store`'s."""
    if tenant is None:
        with read_store(path, stop) as db:
            rows = [] if db is None else db.execute(EVERY_TENANT_SESSION_SQL, (session,)).fetchall()
    else:
        rows = _rows_within(path, "SELECT * FROM sessions WHERE session = ?", session, "tenant", tenant, "tenant",
                            stop)
    return [_session_dict(r) for r in rows]


def find_session_as_given(path: Path, given: str, tenant: str | None,
                          stop: threading.Event | None = None) -> list[dict]:
    """`find_session` for an id a person typed or pasted: the sessions with that id, or
    when there are none, those with its percent-decoded form (`given_id_forms`: an
    answer's `x-session-id`), or either as the gateway stored it (`whole_id_forms`: cut);
    within `tenant` either way. A session's own id is in each found one's `session`, for
    every look-up after this one. `stop`: `read_store`'s."""
    for session in whole_id_forms(given):
        found = find_session(path, session, tenant, stop)
        if found:
            return found
    return []


def find_request(path: Path, request_id: str, tenant: str | None) -> list[tuple[dict, int]]:
    """The sessions (within `tenant`, or every tenant's for an admin) holding the step
    whose request id (a reply's `x-request-id`) is `request_id`, each with that step's index."""
    rows = _rows_within(path, "SELECT sessions.*, steps.idx AS request_step FROM steps JOIN sessions "
                        "USING (tenant, session) WHERE steps.response_id = ?", request_id, "steps.tenant",
                        tenant, "tenant, session")
    found = []
    for row in rows:
        session = _session_dict(row)
        found.append((session, session.pop("request_step")))
    return found
