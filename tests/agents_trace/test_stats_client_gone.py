"""`/v1/traces/stats` when its client leaves mid-walk: the walk of the store ends soon
after (a few hundred steps at most), not at the end of the window (FI92; QA174: a whole
store walk went on for seconds per closed tab). Counts of steps walked, not timings."""
from __future__ import annotations

import asyncio
import socket
import sqlite3
import threading
import time

import agents_trace.api as api_module
from agents_trace.api import Viewer
from agents_trace.prompt_blocks import PreviousPrompt

from tests.agents_trace.helpers import session_with_an_eviction, viewer_app
from tests.gateway.serving import start_server

KEYS = {"k-admin": Viewer("ops", is_admin=True)}
COPIES = 1500   # of the 3-step session: 4500 steps
LEAVE_AT = 100   # the step the walk is held at while the client leaves
MOST_AFTER = 1000   # steps a walk may still take after its client left (a chunk between looks: far fewer)


def many_steps(tmp_path) -> tuple:
    """A store of COPIES sessions like helpers' session_with_an_eviction: its path, steps."""
    path, _ = session_with_an_eviction(tmp_path)
    with sqlite3.connect(path) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(steps)")]
        picked = ", ".join("session || '-' || n" if column == "session" else column for column in columns)
        db.execute(f"INSERT INTO steps ({', '.join(columns)}) SELECT {picked} FROM steps, (WITH RECURSIVE "
                   f"c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < {COPIES - 1}) SELECT n FROM c)")
        num_steps = db.execute("SELECT COUNT(*) FROM steps").fetchone()[0]
    return path, num_steps


class Walk:
    """Counts the steps the stats walk takes (each one `PreviousPrompt.reuse_in_walk`) and
    holds it at step LEAVE_AT until `go` is set; `ended` once tenant_stats returned or
    raised; `stop`: the event the route gave tenant_stats, if any."""

    def __init__(self, monkeypatch, on_hold) -> None:
        self.walked, self.at_leave, self.stop = 0, None, None
        self.go, self.ended = threading.Event(), threading.Event()
        real_reuse, real_stats = PreviousPrompt.reuse_in_walk, api_module.tenant_stats

        def counted(prompt, *args, **kwargs):
            self.walked += 1
            if self.walked == LEAVE_AT:
                on_hold()
                self.go.wait(30)
            return real_reuse(prompt, *args, **kwargs)

        def watched(*args, **kwargs):
            self.stop = args[2] if len(args) > 2 else kwargs.get("stop")
            try:
                return real_stats(*args, **kwargs)
            finally:
                self.ended.set()
        monkeypatch.setattr(PreviousPrompt, "reuse_in_walk", counted)
        monkeypatch.setattr(api_module, "tenant_stats", watched)


async def test_a_stats_walk_ends_soon_after_its_client_disconnects(tmp_path, monkeypatch):
    path, num_steps = many_steps(tmp_path)
    loop = asyncio.get_running_loop()
    held = asyncio.Event()
    walk = Walk(monkeypatch, lambda: loop.call_soon_threadsafe(held.set))
    messages = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict:   # as uvicorn's: the body, then (blocking) the disconnect
        if messages:
            return messages.pop()
        await held.wait()
        walk.at_leave = walk.walked
        loop.call_soon(walk.go.set)   # once the app has taken the disconnect in
        return {"type": "http.disconnect"}

    sent = []

    async def send(message: dict) -> None:
        sent.append(message)
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": "/v1/traces/stats", "raw_path": b"/v1/traces/stats", "query_string": b"", "root_path": "",
             "headers": [(b"host", b"t"), (b"authorization", b"Bearer k-admin")],
             "client": ("127.0.0.1", 1), "server": ("t", 80)}
    answering = asyncio.ensure_future(viewer_app(path, KEYS)(scope, receive, send))
    await held.wait()
    for _ in range(200):   # a route that never asks for the disconnect: let the walk go on anyway
        if walk.go.is_set():
            break
        await asyncio.sleep(0.01)
    if not walk.go.is_set():
        walk.at_leave = walk.walked
        walk.go.set()
    await asyncio.wait_for(answering, 60)
    assert walk.ended.is_set()
    walked_after = walk.walked - walk.at_leave
    assert walked_after < MOST_AFTER, f"walked {walked_after} of {num_steps} steps after the client left"
    assert sent and sent[0]["status"] not in (200, 500)


def test_a_served_stats_walk_ends_soon_after_its_client_closes_the_connection(tmp_path, monkeypatch):
    path, num_steps = many_steps(tmp_path)
    held = threading.Event()
    walk = Walk(monkeypatch, held.set)
    server = start_server(viewer_app(path, KEYS))
    try:
        client = socket.create_connection(("127.0.0.1", server.port))
        client.sendall(b"GET /v1/traces/stats HTTP/1.1\r\nhost: t\r\nauthorization: Bearer k-admin\r\n\r\n")
        assert held.wait(60)
        client.close()   # a closed tab, a fetch given up
        for tick in range(3000):   # until the server has noticed (a route given no stop: 3 s)
            if walk.stop.is_set() if walk.stop is not None else tick > 300:
                break
            time.sleep(0.01)
        walk.at_leave = walk.walked
        walk.go.set()
        assert walk.ended.wait(60)
        walked_after = walk.walked - walk.at_leave
        assert walked_after < MOST_AFTER, f"walked {walked_after} of {num_steps} steps after the client left"
    finally:
        walk.go.set()
        server.stop()
