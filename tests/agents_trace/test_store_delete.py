"""QA194 F1: a big `delete_sessions` deletes in many short transactions of whole sessions,
so another connection (a gateway's writer) writes between them, and no reader ever sees a
session half deleted."""
from __future__ import annotations

import dataclasses
import sqlite3
import threading
import time
from contextlib import closing

from agents_trace.event_queue import EventQueue
from agents_trace.records import After, SessionId, Step
from agents_trace.store import TraceStore
from agents_trace.store_delete import delete_sessions
from agents_trace.writer import TraceWriter, WriterStats

SIZES = {"s0": 10, "s1": 10, "s2": 10, "s3": 10, "s4": 10, "s5": 10, "big": 40}


def _store_with_sessions(tmp_path):
    store = TraceStore(tmp_path / "t.sqlite3", max_age_s=1e9, max_bytes=10**9)
    writer = TraceWriter(events=EventQueue(10, WriterStats()), stats=WriterStats(), otel=None, store=store,
                         expire=lambda _now_s: [], clock=time.time, idle_timeout_s=600.0, retention_interval_s=3600.0)
    store.open()
    rows = []
    for tenant, sizes in (("gone", SIZES), ("kept", {"live": 3})):
        for session, size in sizes.items():
            for index in range(size):
                at_s = 1_700_000_000.0 + index
                rows.append(writer._on_step(Step(tenant, SessionId(session), index, "header", "chat", "m", None, at_s,
                                                 at_s + 0.1, After("start"), None, None, 1, False, 10, 0, 2, 0.05,
                                                 "w0", "stop", ())))
    writer._write(rows, [])
    store.close()
    return store.path


def _counts(db: sqlite3.Connection, tenant: str) -> dict[str, tuple[int, int]]:
    """Per session of `tenant`: (steps stored, the summary's num_steps; -1 without one)."""
    steps = dict(db.execute("SELECT session, COUNT(*) FROM steps WHERE tenant = ? GROUP BY session", (tenant,)))
    summaries = dict(db.execute("SELECT session, num_steps FROM sessions WHERE tenant = ?", (tenant,)))
    return {s: (steps.get(s, 0), summaries.get(s, -1)) for s in set(steps) | set(summaries)}


def test_a_big_delete_runs_in_short_transactions_of_whole_sessions_another_writer_going_between(tmp_path):
    path = _store_with_sessions(tmp_path)
    seen: list[tuple[int, int, dict]] = []
    with closing(sqlite3.connect(str(path), isolation_level=None, timeout=0)) as other:   # never waits

        def between(num_sessions: int, num_steps: int) -> None:
            other.execute("BEGIN IMMEDIATE")   # "database is locked" were the delete still holding the lock
            other.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('between', ?)", (str(num_sessions),))
            other.execute("COMMIT")
            seen.append((num_sessions, num_steps, _counts(other, "gone")))

        keys = [("gone", session) for session in SIZES]
        assert delete_sessions(path, keys, max_steps=25, after_each=between) == 100
    # known answer: runs of whole sessions of at most 25 steps; the 40-step session alone
    assert [(sessions, steps) for sessions, steps, _ in seen] == [(2, 20), (4, 40), (6, 60), (7, 100)]
    for _, _, counts in seen:   # each session there whole (its summary matching its steps), or gone whole
        assert all(stored == summary for stored, summary in counts.values()), counts
    assert set(seen[0][2]) == {"s2", "s3", "s4", "s5", "big"}
    with closing(sqlite3.connect(str(path))) as db:
        assert _counts(db, "gone") == {}
        assert _counts(db, "kept") == {"live": (3, 3)}
        assert db.execute("SELECT value FROM meta WHERE key = 'between'").fetchone() == ("7",)
        assert db.execute("SELECT COUNT(*) FROM step_content").fetchone() == (0,)


def test_a_delete_of_one_session_is_one_transaction(tmp_path):
    path = _store_with_sessions(tmp_path)
    calls = []
    assert delete_sessions(path, [("gone", "big")], max_steps=5, after_each=lambda *a: calls.append(a)) == 40
    assert calls == [(1, 40)]


def test_a_writer_waiting_on_a_big_delete_gets_in_before_it_ends(tmp_path):
    """The default batches: 6 sessions of 2,000 steps go in several transactions, and a
    connection asking for the write lock meanwhile (with a gateway's busy timeout) gets it
    while sessions remain to delete, not only once all are gone."""
    store = TraceStore(tmp_path / "t.sqlite3", max_age_s=1e9, max_bytes=10**9)
    writer = TraceWriter(events=EventQueue(10, WriterStats()), stats=WriterStats(), otel=None, store=store,
                         expire=lambda _now_s: [], clock=time.time, idle_timeout_s=600.0, retention_interval_s=3600.0)
    store.open()
    step = Step("gone", SessionId("x"), 0, "header", "chat", "m", None, 1.0, 1.1, After("start"), None, None, 1, False,
                10, 0, 2, 0.05, "w0", "stop", ())
    writer._write([writer._on_step(dataclasses.replace(step, session=SessionId(f"s{k}"), index=i))
                   for k in range(6) for i in range(2000)], [])
    store.close()
    path = store.path
    deleting = threading.Thread(target=delete_sessions, args=(path, [("gone", f"s{k}") for k in range(6)]))
    with closing(sqlite3.connect(str(path), isolation_level=None, timeout=5.0)) as other:
        deleting.start()
        try:
            while other.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 6:   # the first one is gone
                time.sleep(0.001)
            other.execute("BEGIN IMMEDIATE")
            remaining = other.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
            other.execute("COMMIT")
        finally:
            deleting.join()
    assert 0 < remaining < 6
