"""The steps' arrival indexes (FI97): every windowed query `tenant_stats` runs (since,
until or both; admin or tenant-scoped) reads the steps through `steps_by_arrived` /
`steps_by_tenant_arrived`, not the whole table; the figures are those of the steps that
arrived in the window, as a reader of a store without the indexes (one no writer has
upgraded) finds them; a writer opening such a store builds them."""
from __future__ import annotations

import contextlib
import shutil
import sqlite3

import pytest

import agents_trace.store_stats as store_stats
from agents_trace.store_schema import connect_reader, connect_writer
from agents_trace.store_stats import StatsWindow, tenant_stats

from tests.agents_trace.helpers import session_with_an_eviction

INDEXES = ("steps_by_arrived", "steps_by_tenant_arrived")
COPIES = 60   # of the three-step session, 10 s apart, over tenants acme0..acme2


@pytest.fixture
def store(tmp_path):
    """helpers' session_with_an_eviction, COPIES times over 3 tenants, each copy 10 s after
    the one before; every 7th step failed. Returns the store and its first arrival."""
    path, _ = session_with_an_eviction(tmp_path)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(steps)")]
        moved = {"session": "session || '-' || n", "tenant": "tenant || (n % 3)",
                 **{column: f"{column} + 10.0 * n" for column in ("arrived_s", "ended_s", "prev_ended_s")}}
        picked = ", ".join(moved.get(column, column) for column in columns)
        db.execute(f"INSERT INTO steps ({', '.join(columns)}) SELECT {picked} FROM steps, (WITH RECURSIVE "
                   f"c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < {COPIES}) SELECT n FROM c)")
        db.execute("DELETE FROM steps WHERE tenant = 'acme'")
        db.execute("UPDATE steps SET error = 'engine_error' WHERE rowid % 7 = 0")
        [(first_s,)] = db.execute("SELECT MIN(arrived_s) FROM steps").fetchall()
    return path, first_s


def windows(first_s: float) -> list[StatsWindow]:
    """Open on either side, bounded on both, empty (before the first, after the last), for
    every tenant and for one."""
    spans = ((first_s + 200, None), (None, first_s + 150), (first_s + 95, first_s + 305),
             (first_s + 1e6, None), (None, first_s - 1))
    return [StatsWindow(tenant=tenant, since_s=since_s, until_s=until_s)
            for tenant in (None, "acme1") for since_s, until_s in spans]


def queries_run(monkeypatch, path, window: StatsWindow) -> list[tuple[str, tuple]]:
    """The (sql, parameters) `tenant_stats` runs on its connection for `window`."""
    seen: list[tuple[str, tuple]] = []
    real = store_stats.read_store

    class Recording:
        def __init__(self, db):
            self._db = db

        def execute(self, sql, params=()):
            seen.append((sql, tuple(params)))
            return self._db.execute(sql, params)

        def __getattr__(self, name):
            return getattr(self._db, name)

    @contextlib.contextmanager
    def recorded(store_path):
        with real(store_path) as db:
            yield None if db is None else Recording(db)

    monkeypatch.setattr(store_stats, "read_store", recorded)
    tenant_stats(path, window)
    monkeypatch.setattr(store_stats, "read_store", real)
    return seen


def test_every_windowed_stats_query_reads_the_steps_by_arrival(store, monkeypatch):
    path, first_s = store
    connect_writer(path).close()   # a store a writer of this version opened
    for window in windows(first_s):
        windowed = [(sql, params) for sql, params in queries_run(monkeypatch, path, window)
                    if "FROM steps WHERE" in sql and "arrived_s >=" in sql]
        assert len(windowed) == 2, window   # the per-tenant sums and the walk
        with connect_reader(path) as db:
            for sql, params in windowed:
                plan = " ".join(row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql, params))
                wanted = "steps_by_arrived" if window.tenant is None else "steps_by_tenant_arrived"
                assert f"USING INDEX {wanted} (" in plan, (window, plan)


def _by_hand(path, window: StatsWindow) -> dict[str, tuple]:
    """Per tenant: sessions, steps, errors, prompt tokens, first and last arrival, from
    every step read and filtered here."""
    with connect_reader(path) as db:
        rows = db.execute("SELECT tenant, session, arrived_s, error, num_input_tokens FROM steps").fetchall()
    kept: dict[str, list] = {}
    for row in rows:
        if ((window.tenant is None or row["tenant"] == window.tenant)
                and (window.since_s is None or row["arrived_s"] >= window.since_s)
                and (window.until_s is None or row["arrived_s"] <= window.until_s)):
            kept.setdefault(row["tenant"], []).append(row)
    return {tenant: (len({r["session"] for r in steps}), len(steps), sum(r["error"] is not None for r in steps),
                     sum(r["num_input_tokens"] for r in steps),   # each ran on the model (3 tokens out)
                     min(r["arrived_s"] for r in steps), max(r["arrived_s"] for r in steps))
            for tenant, steps in kept.items()}


def test_windowed_figures_are_those_of_the_steps_in_the_window_indexed_or_not(store, tmp_path):
    path, first_s = store
    connect_writer(path).close()
    unindexed = tmp_path / "older.sqlite3"
    shutil.copyfile(path, unindexed)
    with contextlib.closing(sqlite3.connect(unindexed)) as db:
        for name in INDEXES:
            db.execute(f"DROP INDEX IF EXISTS {name}")
    nonempty = 0
    for window in windows(first_s):
        found = tenant_stats(path, window)
        got = {row["tenant"]: (row["sessions"], row["steps"], row["errors"], row["prompt_tokens"],
                               row["first_s"], row["last_s"]) for row in found["tenants"]}
        assert got == _by_hand(path, window), window
        nonempty += bool(got)
        # a reader of a store no writer has upgraded: the same figures, every one
        assert tenant_stats(unindexed, window) == found, window
    assert nonempty == 6   # the empty windows are empty, the others hold steps


def test_a_writer_opening_an_older_store_builds_the_indexes(store):
    path, first_s = store
    with contextlib.closing(sqlite3.connect(path)) as db:
        for name in INDEXES:
            db.execute(f"DROP INDEX IF EXISTS {name}")
    before = tenant_stats(path, StatsWindow(since_s=first_s + 200))
    connect_writer(path).close()
    with connect_reader(path) as db:
        names = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert set(INDEXES) <= names
    assert tenant_stats(path, StatsWindow(since_s=first_s + 200)) == before
