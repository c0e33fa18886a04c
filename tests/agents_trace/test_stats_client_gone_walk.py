"""store_stats' `stop`: set, the walk raises StatsCancelled within a chunk of steps;
never set, the figures are those of a walk without one (and the total, summed from the
tenants' rows, is the store's own sums)."""
from __future__ import annotations

import sqlite3
import threading

import pytest

from agents_trace.prompt_blocks import PreviousPrompt
from agents_trace.store_stats import _CHUNK_ROWS, _SUMS, StatsCancelled, StatsWindow, tenant_stats

from tests.agents_trace.helpers import session_with_an_eviction


@pytest.fixture
def store(tmp_path):
    """helpers' session_with_an_eviction, 600 times over 3 tenants, every 7th step failed."""
    path, _ = session_with_an_eviction(tmp_path)
    with sqlite3.connect(path) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(steps)")]
        renamed = {"session": "session || '-' || n", "tenant": "tenant || (n % 3)"}
        picked = ", ".join(renamed.get(column, column) for column in columns)
        db.execute(f"INSERT INTO steps ({', '.join(columns)}) SELECT {picked} FROM steps, (WITH RECURSIVE "
                   "c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 600) SELECT n FROM c)")
        db.execute("DELETE FROM steps WHERE tenant = 'acme'")
        db.execute("UPDATE steps SET error = 'engine_error' WHERE rowid % 7 = 0")
    return path


def counting_walk(monkeypatch, at_step: int | None = None, then=None) -> list[int]:
    walked = [0]
    real = PreviousPrompt.reuse_in_walk

    def counted(prompt, *args, **kwargs):
        walked[0] += 1
        if walked[0] == at_step:
            then()
        return real(prompt, *args, **kwargs)
    monkeypatch.setattr(PreviousPrompt, "reuse_in_walk", counted)
    return walked


def test_a_stop_set_mid_walk_ends_it_within_a_chunk(store, monkeypatch):
    stop = threading.Event()
    walked = counting_walk(monkeypatch, at_step=100, then=stop.set)
    with pytest.raises(StatsCancelled):
        tenant_stats(store, StatsWindow(), stop)
    assert 100 <= walked[0] <= 100 + _CHUNK_ROWS


def test_a_stop_set_before_walks_nothing(store, monkeypatch):
    stop = threading.Event()
    stop.set()
    walked = counting_walk(monkeypatch)
    with pytest.raises(StatsCancelled):
        tenant_stats(store, StatsWindow(since_s=0.0), stop)
    assert walked[0] == 0


def test_a_stop_never_set_changes_no_figure(store):
    with sqlite3.connect(store) as db:
        db.row_factory = sqlite3.Row
        sums = dict(db.execute(f"SELECT {_SUMS} FROM steps").fetchone())
        first_s = db.execute("SELECT MIN(arrived_s) FROM steps").fetchone()[0]
    for window in (StatsWindow(), StatsWindow(tenant="acme1"), StatsWindow(since_s=first_s + 3.0)):
        assert tenant_stats(store, window, threading.Event()) == tenant_stats(store, window)
    figures = tenant_stats(store, StatsWindow())
    assert len(figures["tenants"]) == 3 and figures["total"]["errors"] > 0
    assert {key: figures["total"][key] for key in sums} == sums
    assert figures["total"]["prefix_from_previous_tokens"] > 0
