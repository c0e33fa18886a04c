"""QA197 F1, F6: a trace store another connection keeps write-locked past the busy timeout
is reported as locked, not as a place that cannot be written or a store that cannot be
read: a writer opening it waits for it (up to START_LOCK_WAIT_S, one warning); `traces
delete` and the API's DELETE say it is locked and how much went before; an interrupted
`traces delete` says how many sessions it removed."""
from __future__ import annotations

import argparse
import sqlite3
import threading
import time
from contextlib import closing

import httpx
import pytest

from agents_trace import store_delete, store_schema
from agents_trace.api import Viewer
from agents_trace.store import StepRow, TraceStore
from agents_trace.store_queries import SessionFilter, list_sessions
from agents_trace.traces_command import register
from agents_trace.store_locks import is_store_busy

from tests.agents_trace.helpers import viewer_app
from tests.agents_trace.test_writer_held import _step

BUSY_MS = 50


def _store(tmp_path, sessions: int = 1):
    path = tmp_path / "t.sqlite3"
    store = TraceStore(path, max_age_s=1e9, max_bytes=10**9)
    store.open()
    store.write([StepRow(_step(f"s{i}", 0), None, None, None) for i in range(sessions)], [])
    store.close()
    return path


def _locker(path) -> sqlite3.Connection:
    locker = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    locker.execute("BEGIN IMMEDIATE")
    return locker


def test_a_writer_opening_a_store_locked_past_the_busy_timeout_waits_for_the_lock(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(store_schema, "BUSY_TIMEOUT_MS", BUSY_MS)
    path = _store(tmp_path)
    with closing(_locker(path)) as locker, caplog.at_level("WARNING", logger="stepahead.agents_trace"):
        threading.Timer(0.4, lambda: locker.execute("ROLLBACK")).start()   # 8 busy timeouts
        store = TraceStore(path, max_age_s=1e9, max_bytes=10**9)
        store.open()
        store.close()
    assert caplog.text.count("is locked by another connection") == 1
    assert "waiting for it, 30 s at most in all" in caplog.text


def test_a_store_locked_throughout_fails_the_opening_saying_it_is_locked(tmp_path, monkeypatch):
    monkeypatch.setattr(store_schema, "BUSY_TIMEOUT_MS", BUSY_MS)
    monkeypatch.setattr(store_schema, "START_LOCK_WAIT_S", 0.3, raising=False)
    path = _store(tmp_path)
    with closing(_locker(path)):
        began_s = time.monotonic()
        with pytest.raises(sqlite3.OperationalError) as failed:   # a stated start failure: one line
            TraceStore(path, max_age_s=1e9, max_bytes=10**9).open()
        assert time.monotonic() - began_s < 2.0
    assert "held the store's write lock for 0.3 s" in str(failed.value)
    assert is_store_busy(failed.value)


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="stepahead")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.handler(args)


def test_traces_delete_on_a_locked_store_says_it_is_locked_not_unreadable(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(store_delete, "BUSY_TIMEOUT_MS", BUSY_MS)
    path = _store(tmp_path)
    with closing(_locker(path)):
        assert _run(["traces", "delete", "--session", "s0", "--tenant", "alpha", "--db", str(path), "--yes"]) == 2
    err = capsys.readouterr().err
    assert "cannot read" not in err
    assert f"the trace store {path} is locked by another connection" in err
    assert "deleted 0 of 1 session (0 steps); try again once it is free" in err
    assert len(list_sessions(path, SessionFilter())["data"]) == 1


def test_an_interrupted_traces_delete_says_how_many_sessions_it_removed(tmp_path, monkeypatch, capsys):
    path = _store(tmp_path, sessions=5)
    monkeypatch.setattr(store_delete, "DELETE_BATCH_SESSIONS", 1)   # a transaction a session
    calls, delete = [], store_delete.delete_in_one_transaction

    def interrupted(db, keys, begin="BEGIN"):
        calls.append(keys)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return delete(db, keys, begin)

    monkeypatch.setattr(store_delete, "delete_in_one_transaction", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _run(["traces", "delete", "--all", "--tenant", "alpha", "--db", str(path), "--yes"])
    assert "deleted 2 of 5 sessions (2 steps) before the stop; the rest are whole" in capsys.readouterr().err
    assert len(list_sessions(path, SessionFilter())["data"]) == 3


async def test_the_api_delete_on_a_locked_store_is_a_503_saying_it_is_locked(tmp_path, monkeypatch):
    monkeypatch.setattr(store_delete, "BUSY_TIMEOUT_MS", BUSY_MS)
    path = _store(tmp_path)
    app = viewer_app(path, {"k": Viewer(tenant="alpha", is_admin=False)})
    with closing(_locker(path)):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            answer = await client.delete("/v1/traces/sessions/s0", headers={"authorization": "Bearer k"})
    assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
    detail = answer.json()["detail"]
    assert detail["code"] == "trace_store_unavailable"
    assert detail["message"].startswith("The trace store is locked by another connection")
    assert "nothing was deleted, try again shortly" in detail["message"]
    assert str(path) not in detail["message"]
