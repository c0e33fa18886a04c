"""The writer's event queue: batches for one transaction, never holds a flush back."""
import threading
import time

from agents_trace.records import After, SessionEnded, SessionId, Step
from agents_trace.event_queue import EventQueue
from agents_trace.writer import TraceWriter, WriterStats, _Flush


def _ended(number: int) -> SessionEnded:
    return SessionEnded("alpha", f"s{number}", 1, None, "idle")


def test_take_lingers_after_a_trace_event_so_later_ones_join_its_batch():
    events = EventQueue(100, WriterStats())
    events.offer(_ended(0))
    later = threading.Timer(0.02, lambda: [events.offer(_ended(n)) for n in (1, 2, 3)])
    later.start()
    batch = events.take(timeout_s=1.0, linger_s=0.5)
    later.join()
    assert [e.session for e in batch] == ["s0", "s1", "s2", "s3"]
    events.offer(_ended(4))
    threading.Timer(0.05, lambda: events.offer(_ended(5))).start()
    assert [e.session for e in events.take(timeout_s=1.0)] == ["s4"]   # no linger asked
    assert [e.session for e in events.take(timeout_s=1.0)] == ["s5"]


def test_a_flush_is_taken_at_once_without_lingering():
    events = EventQueue(100, WriterStats())
    marker = _Flush(threading.Event())
    events.put_control(marker, timeout_s=1.0)
    began_s = time.monotonic()
    assert events.take(timeout_s=1.0, linger_s=5.0) == [marker]
    assert time.monotonic() - began_s < 1.0
    assert events.take(timeout_s=0.01, linger_s=5.0) == []   # nothing queued: no wait past the timeout


def _step(session: str, index: int, at_s: float) -> Step:
    return Step("alpha", SessionId(session), index, "header", "chat", "m", None, at_s, at_s + 0.1, After("start"),
                None, None, 1, False, 10, 0, 2, 0.05, "w0", "stop", ())


def test_the_backstop_ends_only_sessions_unseen_for_long_oldest_first():
    """Sessions whose end event was lost (a full queue) end from the writer's own sweep once
    unseen for 2 x idle + 60 s; it walks the oldest first and stops at the first fresh one."""
    now = [0.0]
    writer = TraceWriter(events=EventQueue(10, WriterStats()), stats=WriterStats(), otel=None, store=None,
                         expire=lambda _now_s: [], clock=lambda: now[0], idle_timeout_s=10.0,
                         retention_interval_s=60.0)
    for session, at_s in (("a", 0.0), ("b", 50.0), ("c", 100.0)):
        now[0] = at_s
        writer._on_step(_step(session, 0, at_s))
    now[0] = 110.0
    writer._on_step(_step("a", 1, 110.0))   # seen again: now the freshest
    now[0] = 131.0   # stale before 131 - 80 = 51: only b (50)
    assert [(e.session, e.reason) for e in writer._sweep()] == [("b", "idle")]
    assert list(writer._open) == [("alpha", "b"), ("alpha", "c"), ("alpha", "a")]   # least recently seen first
    now[0] = 500.0
    assert [e.session for e in writer._sweep()] == ["b", "c", "a"]


def test_a_store_failing_every_write_is_logged_once_a_minute_and_every_failure_counted(caplog):
    import sqlite3

    class FullDisk:
        def surviving_damage(self, operation):
            return operation()

        def reopen_if_gone(self):
            return False

        def write(self, rows, ended, ended_spans=()):
            raise sqlite3.OperationalError("database or disk is full")

    stats = WriterStats()
    writer = TraceWriter(events=EventQueue(10, stats), stats=stats, otel=None, store=FullDisk(),
                         expire=lambda _now_s: [], clock=time.time, idle_timeout_s=10.0,
                         retention_interval_s=60.0)
    with caplog.at_level("ERROR", logger="stepahead.agents_trace"):
        for _ in range(50):   # a batch every 20 ms under load: a second of it
            writer._write([], [_ended(0)])
    assert stats.num_store_errors == 50
    assert [(record.getMessage(), record.exc_info) for record in caplog.records] == [
        ("stepahead: warning: dropped 0 step(s): writing them to the trace store failed: OperationalError: "
         "database or disk is full", None)]


def test_a_store_deleted_while_open_is_started_anew_at_its_path_and_keeps_the_later_steps(tmp_path, caplog):
    from agents_trace.store import TraceStore
    from agents_trace.store_queries import SessionFilter, list_sessions

    path = tmp_path / "traces" / "t.sqlite3"
    store = TraceStore(path, max_age_s=1e9, max_bytes=10**9)
    writer = TraceWriter(events=EventQueue(10, WriterStats()), stats=WriterStats(), otel=None, store=store,
                         expire=lambda _now_s: [], clock=time.time, idle_timeout_s=10.0, retention_interval_s=60.0)
    store.open()
    writer._write([writer._on_step(_step("before", 0, 1.0))], [])
    for name in ("t.sqlite3", "t.sqlite3-wal", "t.sqlite3-shm"):
        (path.parent / name).unlink(missing_ok=True)
    path.parent.rmdir()   # its directory too
    with caplog.at_level("WARNING", logger="stepahead.agents_trace"):
        writer._write([writer._on_step(_step("after", 0, 2.0))], [])
        writer._write([writer._on_step(_step("after", 1, 3.0))], [])
    sessions = list_sessions(path, SessionFilter())["data"]
    assert [(s["session"], s["num_steps"]) for s in sessions] == [("after", 2)]
    assert store.num_reopened == 1 and writer.stats.num_store_errors == 0
    assert caplog.text.count(f"the trace store {path} was deleted or replaced while open") == 1
    store.close()
