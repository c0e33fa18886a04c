"""A session that goes on after its gateway restarted (the same `x-session-id`): the
prefix cache died with the old process, so its first step after the restart found nothing
of the last prompt before it cached, and no policy evicted anything. Its
`evicted_prefix_tokens` is unknown (null), in the live count, the session's page, its
export and the stats; its `prefix_from_previous_tokens` still shows on the page and in
the export (the prompts did share it), while the stats, as the live count, leave the step
out. Each step keeps its own gateway's start, so another gateway's start on a shared
store changes none of this one's figures, and a store without it counts as before (FI80)."""
from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest

from agents_trace.prompt_blocks import RECORD_BLOCK_SIZE, PreviousPrompt
from agents_trace.records import StepResult
from agents_trace.step_queries import iter_session_steps, list_steps
from agents_trace.store_schema import connect_writer
from agents_trace.store_stats import StatsWindow, tenant_stats
from agents_trace.traces_view import _lost_between_steps

from tests.agents_trace.helpers import ManualClock, make_tracer

B = RECORD_BLOCK_SIZE
BODY = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
PROMPTS = [list(range(n)) for n in (200, 300, 400, 500)]   # each extends the one before: 3, 4, 6 blocks shared


@pytest.fixture
def clock():
    return ManualClock()


def _step(tracer, clock, prompt: list[int], cached: int, session: str = "s") -> int | None:
    """One successful step of `session`; what the tracer said its prompt shared with the
    previous one (the live count: None is not counted)."""
    ctx = tracer.begin("acme", {"x-session-id": session}, BODY)
    clock.advance(0.5)
    said = tracer.end(ctx, StepResult(num_input_tokens=len(prompt), num_cached_tokens=cached, num_output_tokens=5,
                                      finish_reason="stop", output_text="ok", prompt_token_ids=prompt))
    clock.advance(2.0)
    return said


def _restarted_session(tmp_path, clock) -> tuple[list, object]:
    """Steps 0 and 1 on one gateway; it stops; steps 2 and 3 on the next one, on the same
    store: step 2 finds nothing cached (a new process), step 3 all but a block of step 2."""
    tracer, _ = make_tracer(tmp_path, clock)
    said = [_step(tracer, clock, PROMPTS[0], 0), _step(tracer, clock, PROMPTS[1], 3 * B)]
    tracer.stop()
    clock.advance(30.0)
    restarted, _ = make_tracer(tmp_path, clock)
    said += [_step(restarted, clock, PROMPTS[2], 0), _step(restarted, clock, PROMPTS[3], 5 * B)]
    restarted.stop()
    return said, tmp_path / "traces.sqlite3"


def test_the_live_count_sees_no_eviction_across_a_restart(tmp_path, clock):
    said, _ = _restarted_session(tmp_path, clock)
    assert said == [None, 3 * B, None, 6 * B]   # step 2: nothing counted; step 3 lost a block (counted)


def test_the_page_export_and_stats_leave_the_eviction_unknown_across_a_restart(tmp_path, clock):
    _, store = _restarted_session(tmp_path, clock)
    steps = list_steps(store, "acme", "s")["data"]
    assert [s["prefix_from_previous_tokens"] for s in steps] == [None, 3 * B, 4 * B, 6 * B]
    assert [s["evicted_prefix_tokens"] for s in steps] == [None, 0, None, B]
    assert all("gateway_started_s" not in s for s in steps)   # the page's fields are as before
    page = list_steps(store, "acme", "s", offset=2)["data"]   # a page starting at the restart
    assert [s["evicted_prefix_tokens"] for s in page] == [None, B]
    exported = [step for step, _ in iter_session_steps(store, "acme", "s")]
    assert [s["evicted_prefix_tokens"] for s in exported] == [None, 0, None, B]
    assert _lost_between_steps(steps).endswith("#3 (64)")   # `traces show`: the restart's step is not listed
    total = tenant_stats(store, StatsWindow())["total"]
    assert (total["prefix_from_previous_tokens"], total["evicted_prefix_tokens"],
            total["steps_with_evicted_prefix"]) == (9 * B, B, 1)   # the restart's step adds neither (as live)
    window = tenant_stats(store, StatsWindow(since_s=steps[2]["arrived_s"]))["total"]
    assert (window["steps"], window["evicted_prefix_tokens"], window["steps_with_evicted_prefix"]) == (2, B, 1)


def test_another_gateways_start_on_the_store_nulls_none_of_this_ones_evictions(tmp_path, clock):
    """Gateway A serves the session throughout; gateway B starts on the same store between
    its steps. A's step 1 lost its prefix while A was up: an eviction, counted."""
    first, _ = make_tracer(tmp_path, clock)
    try:
        _step(first, clock, PROMPTS[0], 0, session="a")
        clock.advance(5.0)
        second, _ = make_tracer(tmp_path, clock)
        try:
            _step(second, clock, PROMPTS[0], 0, session="b")
            clock.advance(5.0)
            assert _step(first, clock, PROMPTS[1], 0, session="a") == 3 * B
        finally:
            second.stop()
    finally:
        first.stop()
    store = tmp_path / "traces.sqlite3"
    assert [s["evicted_prefix_tokens"] for s in list_steps(store, "acme", "a")["data"]] == [None, 3 * B]
    total = tenant_stats(store, StatsWindow())["total"]
    assert (total["evicted_prefix_tokens"], total["steps_with_evicted_prefix"]) == (3 * B, 1)


def test_a_store_without_the_gateways_start_counts_as_before(tmp_path, clock):
    """Rows written before the start was kept (NULL), and a store no writer has upgraded yet
    (no column): the restart's step counts its lost prefix as evicted, as it always did."""
    _, store = _restarted_session(tmp_path, clock)
    with closing(sqlite3.connect(store)) as db, db:
        db.execute("UPDATE steps SET gateway_started_s = NULL")
    assert [s["evicted_prefix_tokens"] for s in list_steps(store, "acme", "s")["data"]] == [None, 0, 4 * B, B]
    assert tenant_stats(store, StatsWindow())["total"]["evicted_prefix_tokens"] == 5 * B
    with closing(sqlite3.connect(store)) as db, db:
        db.execute("ALTER TABLE steps DROP COLUMN gateway_started_s")
    assert [s["evicted_prefix_tokens"] for s in list_steps(store, "acme", "s")["data"]] == [None, 0, 4 * B, B]
    exported = [step for step, _ in iter_session_steps(store, "acme", "s")]
    assert [s["evicted_prefix_tokens"] for s in exported] == [None, 0, 4 * B, B]
    assert tenant_stats(store, StatsWindow())["total"]["evicted_prefix_tokens"] == 5 * B
    connect_writer(store).close()   # a writer opening it adds the column
    with closing(sqlite3.connect(store)) as db:
        assert "gateway_started_s" in {row[1] for row in db.execute("PRAGMA table_info(steps)")}


def test_a_previous_prompt_ended_before_the_cache_started_leaves_the_eviction_unknown():
    previous = PreviousPrompt()
    assert previous.reuse_in_walk([1, 2, 3], 3 * B, 0, True, index=0, arrived_s=0.0, ended_s=1.0,
                                  cache_since_s=None) == (None, None)
    assert previous.reuse_in_walk([1, 2, 3, 4], 4 * B, 0, True, index=1, arrived_s=10.0, ended_s=11.0,
                                  cache_since_s=5.0) == (3 * B, None)   # step 0 ended before the start
    assert previous.reuse_in_walk([1, 2, 3, 4, 5], 5 * B, 2 * B, True, index=2, arrived_s=12.0, ended_s=13.0,
                                  cache_since_s=5.0) == (4 * B, 2 * B)   # step 1's: the same process's
    assert previous.reuse_in_walk([1, 2, 3, 4, 5, 6], 6 * B, 0, False, index=3, arrived_s=14.0, ended_s=15.0,
                                  cache_since_s=5.0) == (5 * B, None)   # a failed step: unknown, as before
