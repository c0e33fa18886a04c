"""An export of many sessions reads them all through one reader connection, in one read
transaction (FI90, QA174: `traces export --all` and GET /v1/traces/export opened one
connection a session, 11,641 for 11,640 sessions, and read each in a snapshot of its own),
with the same lines as before."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import httpx
import pytest

import agents_trace.store_queries as store_queries
from agents_trace.api import Viewer
from agents_trace.export import export_lines, export_sessions_lines
from agents_trace.store_delete import delete_sessions
from agents_trace.store_queries import SessionFilter, matching_session_keys
from agents_trace.traces_command import register

from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session, viewer_app

NUM_SESSIONS = 12


@pytest.fixture
def store(tmp_path) -> Path:
    """12 sessions of 3 steps (tool calls, gaps) in two tenants, interleaved in time."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock, capture_content=True)
    try:
        for i in range(NUM_SESSIONS):
            run_scripted_session(tracer, clock, tenant=("acme", "globex")[i % 2],
                                 headers={"x-session-id": f"s{i:02d}"}, tool_s=(1.0 + i, 0.5))
            clock.advance(-8.0)   # the next session starts before this one ended: their lines interleave
        assert tracer.flush(5.0)
    finally:
        tracer.stop()
    return tmp_path / "traces.sqlite3"


@pytest.fixture
def readers_opened(monkeypatch) -> list[Path]:
    """The paths every reader connection (`connect_reader`) was opened on, in order."""
    opened: list[Path] = []
    real = store_queries.connect_reader

    def counting(path: Path):
        opened.append(path)
        return real(path)

    monkeypatch.setattr(store_queries, "connect_reader", counting)
    return opened


def _without_t(line: str) -> dict:
    value = json.loads(line)
    value.pop("t")
    return value


def test_a_merged_export_reads_every_session_through_one_reader_with_each_sessions_own_lines(store, readers_opened):
    keys = matching_session_keys(store, SessionFilter())
    assert len(keys) == NUM_SESSIONS
    readers_opened.clear()
    merged = list(export_sessions_lines(store, keys, "all"))
    assert len(readers_opened) == 1
    assert len(merged) == 1 + 3 * NUM_SESSIONS
    own = {key: [_without_t(line) for line in list(export_lines(store, *key))[1:]] for key in keys}
    for key, lines in own.items():   # each session's lines, in its order, as its own export has them
        assert [_without_t(line) for line in merged[1:]
                if (json.loads(line)["tenant"], json.loads(line)["session"]) == key] == lines
    times = [json.loads(line)["t"] for line in merged[1:]]
    assert times == sorted(times) and times[0] == 0.0


def test_a_merged_export_is_one_snapshot_of_a_store_changing_under_it(store, readers_opened):
    keys = matching_session_keys(store, SessionFilter())
    before = list(export_sessions_lines(store, keys, "all"))
    deleted = []

    def delete_the_last_session() -> None:   # after the first session is read, another client deletes one
        if not deleted:
            deleted.append(delete_sessions(store, [keys[-1]]))

    during = list(export_sessions_lines(store, keys, "all", on_session=delete_the_last_session))
    assert deleted == [3]
    assert during == before   # the store as it was when the export began
    assert len(list(export_sessions_lines(store, keys, "all"))) == len(before) - 3   # gone for the next one


def test_the_clis_export_of_every_session_opens_a_few_readers_whatever_their_number(store, readers_opened, tmp_path,
                                                                                     capsys):
    parser = argparse.ArgumentParser(prog="stepahead")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["traces", "export", "--all", "--db", str(store), "-o", str(tmp_path / "all.jsonl")])
    assert args.handler(args) == 0
    assert f"{3 * NUM_SESSIONS} requests of {NUM_SESSIONS} sessions" in capsys.readouterr().err
    assert len(readers_opened) <= 3   # the sessions' keys, their lines


async def test_the_apis_export_of_every_session_opens_a_few_readers_whatever_their_number(store, readers_opened):
    app = viewer_app(store, {"k-admin": Viewer("ops", is_admin=True)})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        response = await client.get("/v1/traces/export", headers={"authorization": "Bearer k-admin"})
    assert response.status_code == 200 and len(response.text.splitlines()) == 1 + 3 * NUM_SESSIONS
    assert len(readers_opened) <= 4   # the sessions' keys, the count of steps left out, their lines
