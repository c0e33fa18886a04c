"""The session list and a session's page stop reading the store soon after their client
leaves, as `/v1/traces/stats` does (FI92): on a store of 800,000 sessions (2.4 M steps) an
admin's list filtered by part of an agent's name read for 2.6 s, and an admin's look-up of
an id no session has for 1.3 s, each holding a worker thread for a closed tab."""
from __future__ import annotations

import asyncio
import sqlite3
import threading

import pytest

import agents_trace.api as api_module
from agents_trace.api import Viewer
from agents_trace.store_queries import SessionFilter, find_session_as_given, list_sessions

from tests.agents_trace.helpers import session_with_an_eviction, viewer_app

KEYS = {"k-admin": Viewer("ops", is_admin=True)}
COPIES = 10_000   # of the 3-step session "s": sessions and steps (an id look-up: ~60,000 SQLite steps)


@pytest.fixture(scope="module")
def many_sessions(tmp_path_factory):
    """A store of COPIES + 1 sessions like helpers' session_with_an_eviction (its path)."""
    path, _ = session_with_an_eviction(tmp_path_factory.mktemp("store"))
    copies = (f"(WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < {COPIES}) "
              "SELECT n FROM c)")
    with sqlite3.connect(path) as db:
        for table in ("sessions", "steps"):
            columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
            picked = ", ".join("session || '-' || n" if column == "session" else column for column in columns)
            db.execute(f"INSERT INTO {table} ({', '.join(columns)}) SELECT {picked} FROM {table}, {copies}")
    return path


def test_a_read_whose_stop_is_set_ends_with_read_cancelled_and_no_answer(many_sessions):
    from agents_trace.store_queries import ReadCancelled

    stop = threading.Event()
    everyone = SessionFilter(agent_contains="no such agent")
    assert list_sessions(many_sessions, everyone, stop=stop)["data"] == []   # a stop never set: whole
    assert len(find_session_as_given(many_sessions, "s-7", None, stop)) == 1
    stop.set()
    with pytest.raises(ReadCancelled):
        list_sessions(many_sessions, everyone, stop=stop)
    with pytest.raises(ReadCancelled):
        find_session_as_given(many_sessions, "no%2Fsuch", None, stop)   # an admin's look-up: none starts


class HeldRead:
    """Holds the route's read (`name` in agents_trace.api) until `go` is set, then runs it
    with the stop the route gave it; `outcome`: what it returned or raised."""

    def __init__(self, monkeypatch, name: str, stop_at: int | str, on_hold) -> None:
        self.go, self.ended, self.stop, self.outcome = threading.Event(), threading.Event(), None, None
        real = getattr(api_module, name)

        def held(*args, **kwargs):
            self.stop = kwargs.get("stop") if isinstance(stop_at, str) else \
                (args[stop_at] if len(args) > stop_at else None)
            on_hold()
            self.go.wait(30)
            try:
                self.outcome = real(*args, **kwargs)
                return self.outcome
            except BaseException as error:
                self.outcome = error
                raise
            finally:
                self.ended.set()
        monkeypatch.setattr(api_module, name, held)


async def _leave_while_held(app, path: str, held_read: HeldRead, held: asyncio.Event) -> list[dict]:
    """GET `path` as `k-admin`, the client leaving (`http.disconnect`) while the read is
    held; what the app sent."""
    loop = asyncio.get_running_loop()
    messages = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict:   # as uvicorn's: the body, then (blocking) the disconnect
        if messages:
            return messages.pop()
        await held.wait()
        loop.call_soon(held_read.go.set)   # once the app has taken the disconnect in
        return {"type": "http.disconnect"}

    sent = []

    async def send(message: dict) -> None:
        sent.append(message)
    raw_path, _, query = path.partition("?")
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": raw_path, "raw_path": raw_path.encode(), "query_string": query.encode(), "root_path": "",
             "headers": [(b"host", b"t"), (b"authorization", b"Bearer k-admin")],
             "client": ("127.0.0.1", 1), "server": ("t", 80)}
    answering = asyncio.ensure_future(app(scope, receive, send))
    await held.wait()
    for _ in range(200):   # a route that never asks for the disconnect: let the read go on anyway
        if held_read.go.is_set():
            break
        await asyncio.sleep(0.01)
    held_read.go.set()
    await asyncio.wait_for(answering, 60)
    assert held_read.ended.wait(30)
    return sent


@pytest.mark.parametrize("path, name, stop_at", [
    ("/v1/traces/sessions?agent_contains=zz", "list_sessions", "stop"),
    ("/v1/traces/sessions/no%2Fsuch", "find_session_as_given", 3),
    ("/v1/traces/sessions/no%2Fsuch/steps/0/content", "find_session_as_given", 3),
    ("/v1/traces/export?agent_contains=zz", "matching_session_keys", 2),
])
async def test_a_session_read_stops_soon_after_its_client_disconnects(many_sessions, monkeypatch, path, name, stop_at):
    loop = asyncio.get_running_loop()
    held = asyncio.Event()
    read = HeldRead(monkeypatch, name, stop_at, lambda: loop.call_soon_threadsafe(held.set))
    sent = await _leave_while_held(viewer_app(many_sessions, KEYS), path, read, held)
    assert read.stop is not None and read.stop.is_set(), "the read was given no stop the client's leaving set"
    from agents_trace.store_queries import ReadCancelled

    assert isinstance(read.outcome, ReadCancelled), read.outcome   # cut short, not read to its end
    assert sent[0]["status"] == 499


def test_a_client_that_stays_gets_its_sessions_and_pages(many_sessions):
    from fastapi.testclient import TestClient

    client = TestClient(viewer_app(many_sessions, KEYS))
    headers = {"authorization": "Bearer k-admin"}
    page = client.get("/v1/traces/sessions?limit=5", headers=headers).json()
    assert len(page["data"]) == 5 and page["has_more"] and page["next_before"]
    assert client.get("/v1/traces/sessions/s-12", headers=headers).json()["session"]["session"] == "s-12"
    assert client.get("/v1/traces/sessions/nope", headers=headers).status_code == 404
    assert client.get("/v1/traces/sessions/s-12/steps/0/content", headers=headers).status_code == 404
    exported = client.get("/v1/traces/sessions/s-12/export", headers=headers)
    assert exported.status_code == 200 and exported.text.count("\n") >= 3
