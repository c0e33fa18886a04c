"""Size retention bounds the store on disk, its WAL included (FI90, QA174: a trim's deletes
and page moves stayed in the WAL, at its high-water mark, until shutdown: more disk after
trimming than before), and readers go on meanwhile."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from agents_trace.store import TraceStore
from agents_trace.store_queries import SessionFilter, list_sessions, read_store

from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session

MARGIN_BYTES = 16 << 10   # four pages


def _on_disk(path: Path) -> int:
    """The store's file and its WAL, in bytes."""
    wal = Path(f"{path}-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


@pytest.fixture
def big_store(tmp_path) -> tuple[Path, ManualClock]:
    """30 sessions of 3 steps, each holding a 4,000-character message, written and closed."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    try:
        for i in range(30):
            run_scripted_session(tracer, clock, headers={"x-session-id": f"s{i:02d}"}, user_text=f"{i}" + "x" * 4000)
        assert tracer.flush(5.0)
    finally:
        tracer.stop()
    return tmp_path / "traces.sqlite3", clock


def test_a_size_retention_pass_leaves_file_and_wal_within_the_limit(big_store):
    path, clock = big_store
    store = TraceStore(path, max_age_s=10**9, max_bytes=10**9)
    store.open()
    try:
        store.max_bytes = store.used_bytes() // 3
        assert store.apply_retention(clock.now_s) > 0
        assert store.used_bytes() <= store.max_bytes
        assert _on_disk(path) <= store.max_bytes + MARGIN_BYTES, (
            path.stat().st_size, os.path.getsize(f"{path}-wal"), store.max_bytes)
        assert 0 < len(list_sessions(path, SessionFilter(), limit=100)["data"]) < 30
        assert store.db.execute("PRAGMA journal_size_limit").fetchone()[0] > 0   # a WAL restarted is cut back too
    finally:
        store.close()


def test_readers_read_on_during_a_retention_pass_and_its_wal_cut(big_store):
    path, clock = big_store
    store = TraceStore(path, max_age_s=10**9, max_bytes=10**9)
    store.open()
    failures: list[BaseException] = []
    num_reads = 0
    stop = threading.Event()

    def read() -> None:   # the viewer's list, again and again, during the pass
        nonlocal num_reads
        while not stop.is_set():
            try:
                assert list_sessions(path, SessionFilter(), limit=100)["data"]
                num_reads += 1
            except BaseException as exc:   # noqa: BLE001 - reported below
                failures.append(exc)
                return

    reader = threading.Thread(target=read)
    try:
        store.max_bytes = store.used_bytes() // 3
        reader.start()
        assert store.apply_retention(clock.now_s) > 0
        stop.set()
        reader.join(10.0)
        assert not failures and num_reads > 0
        store.apply_retention(clock.now_s)   # a reader that held the cut off (a loaded machine): the next pass
        assert _on_disk(path) <= store.max_bytes + MARGIN_BYTES
    finally:
        stop.set()
        store.close()


def test_a_reader_on_an_older_snapshot_delays_the_wal_cut_to_a_later_pass_without_blocking(big_store):
    path, clock = big_store
    store = TraceStore(path, max_age_s=10**9, max_bytes=10**9)
    store.open()
    try:
        store.max_bytes = store.used_bytes() // 3
        with read_store(path) as reader:
            reader.execute("BEGIN")
            before = reader.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
            started_s = time.monotonic()
            assert store.apply_retention(clock.now_s) > 0
            assert time.monotonic() - started_s < 4.0   # not the 5 s busy timeout
            assert reader.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == before == 30   # its snapshot
            store.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('note', 'written')")   # writes go on
            reader.execute("COMMIT")
        assert _on_disk(path) > store.max_bytes + MARGIN_BYTES   # the WAL waits for that reader
        assert store.apply_retention(clock.now_s) == 0   # nothing more to remove, but the WAL is cut
        assert _on_disk(path) <= store.max_bytes + MARGIN_BYTES
        assert store.apply_retention(clock.now_s) == 0 and _on_disk(path) <= store.max_bytes + MARGIN_BYTES
    finally:
        store.close()


def test_deleting_sessions_while_a_gateway_holds_the_store_cuts_the_wal_too(big_store):
    """`traces delete` beside a running writer: the pages it gave back went through the WAL,
    which the writer's open connection kept at its high-water mark."""
    from agents_trace.store_delete import delete_sessions

    path, _ = big_store
    writer = TraceStore(path, max_age_s=10**9, max_bytes=10**9)
    writer.open()   # a gateway's writer: its connection keeps the WAL file alive
    try:
        before = path.stat().st_size
        assert delete_sessions(path, [("acme", f"s{i:02d}") for i in range(20)]) > 0
        assert _on_disk(path) < before * 2 // 3, (path.stat().st_size, os.path.getsize(f"{path}-wal"), before)
    finally:
        writer.close()
