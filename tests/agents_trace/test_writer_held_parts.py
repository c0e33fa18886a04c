"""QA197 F2, F3, F5: once another connection's lock on the trace store is gone, the steps
the writer held go in transactions of bounded size (so a connection waiting for the lock
gets it in between, and steps moved by one part are still followed by the next); a drop
past the bound counts its steps, and the busy state is exported; the store upkeep waits
while the store is busy instead of blocking the writer and warning each time."""
from __future__ import annotations

import dataclasses
import sqlite3
import threading
import time
from contextlib import closing

import pytest

from agents_trace.records import SessionEnded, SessionId
from agents_trace.store import StepRow, TraceStore
from agents_trace.store_queries import find_session
from agents_trace.writer_held import WRITE_CHUNK_STEPS

from tests.agents_trace.test_writer_held import LOCKED_S, _indexes, _locker, _started_writer, _step

ROW_S = 0.001   # each step's write made this slow: 500 take 0.5 s


def test_held_steps_go_in_bounded_transactions_so_a_waiting_connection_gets_the_lock_in_between(tmp_path,
                                                                                              monkeypatch):
    """1,500 held steps (0.5 s of writing each 500): another connection asking for the lock
    once the writing began gets it between two parts, before every step is written; in one
    transaction it got it only after all 1,500 (counted by the steps the store holds when it
    got in, not by the time it waited: the machine's load changes that). Every step is stored,
    in order, and the session ends after them."""
    writing, parts = threading.Event(), []
    write_step, write = TraceStore._write_step, TraceStore.write

    def slow_step(self, row, moved):
        writing.set()
        time.sleep(ROW_S)
        return write_step(self, row, moved)

    def counted_write(self, rows, ended, *args, **kwargs):
        placed = write(self, rows, ended, *args, **kwargs)
        parts.append((len(rows), len(ended)))   # committed (a busy try raised)
        return placed

    monkeypatch.setattr(TraceStore, "_write_step", slow_step)
    monkeypatch.setattr(TraceStore, "write", counted_write)
    writer = _started_writer(tmp_path, queue_size=4000, max_held_steps=5000)
    path = writer.store.path
    written_when_in: list[int] = []   # the steps committed when the other connection got the lock

    def waiter() -> None:
        assert writing.wait(10.0)
        with closing(sqlite3.connect(str(path), isolation_level=None, timeout=30.0)) as other:
            other.execute("BEGIN IMMEDIATE")
            written_when_in.append(other.execute("SELECT count(*) FROM steps").fetchone()[0])
            other.execute("COMMIT")

    try:
        with closing(_locker(path)) as locker:
            for index in range(1500):
                assert writer.events.offer(_step("big", index))
            writer.events.offer(SessionEnded("alpha", SessionId("big"), 1500, None, "idle"))
            time.sleep(LOCKED_S)
            assert writer.stats.num_held_steps > 0
            thread = threading.Thread(target=waiter)
            thread.start()
            locker.execute("ROLLBACK")
        thread.join(30.0)
        assert writer.flush(30.0)
        assert written_when_in and written_when_in[0] < 1500   # it did not wait for the whole write
        assert _indexes(path, "alpha", "big")[:3] == [0, 1, 2]
        [session] = find_session(path, "big", "alpha")
        assert (session["num_steps"], session["end_reason"]) == (1500, "idle")
        with closing(sqlite3.connect(str(path))) as db:
            assert [i for (i,) in db.execute("SELECT idx FROM steps ORDER BY idx")] == list(range(1500))
        written = [p for p in parts if p[0] or p[1]]
        assert max(n for n, _ in written) <= WRITE_CHUNK_STEPS
        assert sum(n for n, _ in written) == 1500
        assert written[-1][1] == 1 and all(e == 0 for _, e in written[:-1])   # the end goes with the last part
        assert writer.stats.num_held_steps == 0 and writer.stats.num_store_busy_episodes == 1
    finally:
        writer.stop(5.0)


def _open_elsewhere(path, session: str = "left") -> None:
    """A session another gateway stored and left open 5 s ago."""
    at_s = time.time() - 5.0
    dead = TraceStore(path, max_age_s=1e9, max_bytes=10**9)
    dead.open()
    dead.write([StepRow(dataclasses.replace(_step(session, 0), arrived_s=at_s, ended_s=at_s + 0.1),
                        None, None, None)], [])
    dead.close()


@pytest.mark.parametrize("is_dropping", [True, False])
def test_the_upkeep_waits_while_the_store_is_busy_and_runs_once_it_is_free(tmp_path, caplog, is_dropping):
    """After a drop past the bound (is_dropping), or with nothing to write, sweeps while the
    lock is held neither fail nor warn (each would wait the busy timeout); once it is gone
    the session another gateway left open is ended."""
    path = tmp_path / "t.sqlite3"
    _open_elsewhere(path)
    writer = _started_writer(tmp_path, queue_size=4000, max_held_steps=2, sweep_interval_s=0.02)
    try:
        with caplog.at_level("WARNING", logger="stepahead.agents_trace"), closing(_locker(path)) as locker:
            writer.idle_timeout_s = 0.01   # "left" is past it now
            if is_dropping:
                for index in range(3):
                    writer.events.offer(_step("s", index))
            time.sleep(0.5)   # many sweeps
            assert find_session(path, "left", "alpha")[0]["is_open"] is True
            locker.execute("ROLLBACK")
        deadline = time.monotonic() + 5.0
        while find_session(path, "left", "alpha")[0]["is_open"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert find_session(path, "left", "alpha")[0]["end_reason"] == "idle"
        assert writer.stats.num_store_errors == (1 if is_dropping else 0)   # the drop only
        assert "left open in the trace store failed" not in caplog.text
        assert writer.stats.num_store_busy <= 2   # the write's (or the upkeep's) try; probes after it
    finally:
        writer.stop(5.0)
