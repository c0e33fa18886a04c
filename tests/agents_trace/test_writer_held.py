"""QA194 F1: a trace store locked by another connection past the writer's busy timeout (a
`traces delete`, another gateway's long transaction) delays the writer's steps, never
loses them: held in order, written once the lock is gone, bounded, one warning."""
from __future__ import annotations

import sqlite3
import time
from contextlib import closing

from agents_trace.event_queue import EventQueue
from agents_trace.records import After, SessionEnded, SessionId, Step
from agents_trace.store import TraceStore
from agents_trace.store_queries import SessionFilter, list_sessions
from agents_trace.step_queries import list_steps
from agents_trace.writer import TraceWriter, WriterStats
from agents_trace.store_locks import is_store_busy
from gateway.tracing import tracer_series

BUSY_MS = 50   # the writer's busy timeout here, for 5 s in a gateway
LOCKED_S = 0.4   # a lock held this long is held past it several times


def _step(session: str, index: int, tenant: str = "alpha") -> Step:
    at_s = 1_700_000_000.0 + index
    return Step(tenant, SessionId(session), index, "header", "chat", "m", None, at_s, at_s + 0.1, After("start"),
                None, None, 1, False, 10, 0, 2, 0.05, "w0", "stop", ())


def _started_writer(tmp_path, queue_size: int = 100, **options) -> TraceWriter:
    store = TraceStore(tmp_path / "t.sqlite3", max_age_s=1e9, max_bytes=10**9)
    store.open()
    store.db.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
    stats = WriterStats()
    writer = TraceWriter(events=EventQueue(queue_size, stats), stats=stats, otel=None, store=store,
                         expire=lambda _now_s: [], clock=time.time, idle_timeout_s=600.0,
                         retention_interval_s=3600.0, **options)
    writer.start()
    return writer


def _locker(path) -> sqlite3.Connection:
    """A second connection holding the store's write lock (as `traces delete` did)."""
    locker = sqlite3.connect(str(path), isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    return locker


def _indexes(path, tenant: str, session: str) -> list[int]:
    return [s["index"] for s in list_steps(path, tenant, session, limit=500)["data"]]


def test_steps_written_while_another_connection_holds_the_lock_are_written_after_it_in_order(tmp_path, caplog):
    writer = _started_writer(tmp_path, queue_size=16)
    path = writer.store.path
    try:
        for index in range(3):
            assert writer.events.offer(_step("live", index))
        assert writer.flush(5.0)
        with caplog.at_level("INFO", logger="stepahead.agents_trace"), closing(_locker(path)) as locker:
            began_s = time.monotonic()
            for first in (3, 13, 23):   # 30 steps through a 16-event queue, the lock held throughout
                for index in range(first, first + 10):
                    assert writer.events.offer(_step("live", index))   # the request path never waits
                assert writer.events.offer(_step("other", first, tenant="beta"))
                time.sleep(LOCKED_S / 3)
            assert time.monotonic() - began_s < 5.0
            assert not writer.flush(0.2)   # a flush waits for the held steps
            assert _indexes(path, "alpha", "live") == [0, 1, 2]
            locker.execute("ROLLBACK")
            assert writer.flush(5.0)
        assert _indexes(path, "alpha", "live") == list(range(33))   # none lost, none moved
        assert _indexes(path, "beta", "other") == [3, 13, 23]
        assert writer.stats.num_store_errors == 0 and writer.stats.num_dropped == 0
        assert writer.stats.num_store_busy >= 3   # tried again, not dropped
        assert caplog.text.count("is locked by another connection") == 1   # one warning for the episode
        assert caplog.text.count("step(s) held while the trace store was locked") == 1
        assert "failed" not in caplog.text
    finally:
        writer.stop(5.0)


def test_a_session_ended_while_the_store_is_busy_ends_after_its_steps(tmp_path):
    writer = _started_writer(tmp_path)
    path = writer.store.path
    try:
        with closing(_locker(path)) as locker:
            writer.events.offer(_step("short", 0))
            writer.events.offer(_step("short", 1))
            writer.events.offer(SessionEnded("alpha", SessionId("short"), 2, 1_700_000_001.1, "idle"))
            time.sleep(LOCKED_S)
            locker.execute("COMMIT")
        assert writer.flush(5.0)
        [row] = list_sessions(path, SessionFilter())["data"]
        assert (row["session"], row["num_steps"], row["end_reason"]) == ("short", 2, "idle")
    finally:
        writer.stop(5.0)


class _Tracer:
    """What `tracer_series` reads of a gateway's tracer: the writer's stats."""

    def __init__(self, stats: WriterStats) -> None:
        self.stats = stats
        self.num_stores_set_aside = 0


def test_held_steps_past_the_bound_or_at_the_stop_are_dropped_counted_and_logged_later_ones_kept(tmp_path, caplog):
    """The metrics say it too: the held steps and the busy state while they are held, then
    the steps dropped (not the failed writes)."""
    writer = _started_writer(tmp_path, max_held_steps=4)
    path = writer.store.path
    with caplog.at_level("WARNING", logger="stepahead.agents_trace"):
        with closing(_locker(path)) as locker:
            for index in range(3):
                writer.events.offer(_step("s", index))
            time.sleep(LOCKED_S)   # 3 held
            series = tracer_series(_Tracer(writer.stats))
            assert series[("stepahead_trace_held_steps", ())] == 3.0
            assert series[("stepahead_trace_store_busy_episodes_total", ())] == 1.0
            assert series[("stepahead_trace_store_busy_total", ())] >= 1.0
            for index in range(3, 6):
                writer.events.offer(_step("s", index))
            time.sleep(LOCKED_S)   # 6 would be held, past 4: the 6 go
            locker.execute("ROLLBACK")
        writer.events.offer(_step("s", 6))
        assert writer.flush(5.0)
        assert _indexes(path, "alpha", "s") == [6]
        assert writer.stats.num_store_errors == 1
        series = tracer_series(_Tracer(writer.stats))
        assert series[("stepahead_trace_store_dropped_steps_total", ())] == 6.0   # steps, not writes
        assert series[("stepahead_trace_errors_total", (("kind", "store"),))] == 1.0   # one failed write
        assert series[("stepahead_trace_held_steps", ())] == 0.0
        assert ("dropped 6 step(s): writing them to the trace store failed: OperationalError: database is locked"
                in caplog.text)
        with closing(_locker(path)):   # still busy at the stop: the held step goes, counted and logged
            writer.events.offer(_step("s", 7))
            time.sleep(LOCKED_S)
            began_s = time.monotonic()
            writer.stop(5.0)
            assert time.monotonic() - began_s < 2.0
    assert writer.stats.num_store_errors == 2   # logged at the next such failure: once a minute a kind
    assert caplog.text.count("is locked by another connection") == 2   # one warning an episode


def test_is_store_busy_known_answers(tmp_path):
    path = tmp_path / "b.sqlite3"
    with closing(sqlite3.connect(str(path), isolation_level=None)) as a, \
            closing(sqlite3.connect(str(path), isolation_level=None, timeout=0)) as b:
        a.execute("CREATE TABLE t (x)")
        a.execute("BEGIN IMMEDIATE")
        try:
            b.execute("BEGIN IMMEDIATE")
            raise AssertionError("not locked")
        except sqlite3.OperationalError as exc:
            assert is_store_busy(exc)
        a.execute("ROLLBACK")
    assert not is_store_busy(sqlite3.OperationalError("database or disk is full"))
    assert not is_store_busy(sqlite3.DatabaseError("database disk image is malformed"))
    assert not is_store_busy(OSError("database is locked"))
    assert is_store_busy(sqlite3.OperationalError("database is locked"))   # no error code: the message
