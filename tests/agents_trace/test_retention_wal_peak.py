"""A retention pass that trims much keeps the WAL near its `journal_size_limit` (QA181 F4:
trimming a 302 MB store to 50 MB grew the `-wal` to 254 MB, the freed pages' size, in the
one transaction that gave them back, before the pass cut it): the WAL's size, read after
every statement the pass runs, never goes far past `WAL_KEPT_BYTES`."""
from __future__ import annotations

import os

from agents_trace.records import StepResult
from agents_trace.store import WAL_KEPT_BYTES, TraceStore

from tests.agents_trace.helpers import ManualClock, make_tracer

OK = StepResult(num_input_tokens=10, num_output_tokens=2, worker="w0", ttft_s=0.1, finish_reason="stop",
                output_text="ok")


class _WalWatch:
    """The store's connection, noting the WAL file's size after each statement."""

    def __init__(self, db, wal) -> None:
        self._db, self._wal, self.peak = db, wal, 0

    def _note(self, result):
        self.peak = max(self.peak, self._wal.stat().st_size if self._wal.exists() else 0)
        return result

    def execute(self, *args):
        return self._note(self._db.execute(*args))

    def executemany(self, *args):
        return self._note(self._db.executemany(*args))

    def executescript(self, *args):
        return self._note(self._db.executescript(*args))


def test_trimming_a_store_to_a_tenth_keeps_the_wal_near_its_limit(tmp_path):
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    try:
        for i in range(400):   # about 12 MB: 400 sessions of one 30 KB step, 3 tenants
            ctx = tracer.begin(f"t{i % 3}", {"x-session-id": f"s{i}"}, {"model": "tiny", "messages": [
                {"role": "user", "content": os.urandom(15_000).hex()}]})
            clock.advance(0.5)
            tracer.end(ctx, OK)
        assert tracer.flush(30.0)
    finally:
        tracer.stop()
    path = tmp_path / "traces.sqlite3"
    store = TraceStore(path, max_age_s=1e12, max_bytes=1_000_000)
    store.open()
    try:
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        before = path.stat().st_size
        assert before > 10 * WAL_KEPT_BYTES / 4
        watch = store._db = _WalWatch(store.db, path.with_name(path.name + "-wal"))
        assert store.apply_retention(clock.now_s) > 300
        assert path.stat().st_size <= 1_000_000 + WAL_KEPT_BYTES // 4   # what fits, and a little
        assert watch.peak <= WAL_KEPT_BYTES + (1 << 20), (watch.peak, before)
        assert not path.with_name(path.name + "-wal").stat().st_size   # cut at the pass's end, as before
    finally:
        store._db = store._db._db
        store.close()
