"""A replayed session's later step waits its line's `gap_s` (the recorded tool run or
think time) after the live reply ends, not the whole recorded inter-arrival, which holds
the recorded reply time too; and every request says how late it was sent."""
from __future__ import annotations

import asyncio

import pytest

from agents_trace.replay.report import LATE_SEND_S, build_report, late_send_warning
from agents_trace.replay.runner import ReplayOptions, replay, step_wait_s
from cache.trace_format import TraceHeader, TraceRecord
from tests.agents_trace.replay.fake_gateway import start_fake_gateway


def test_step_wait_s_is_the_lines_gap_else_the_inter_arrival_over_speed():
    previous = TraceRecord(10.0, 4, 1, session="s")
    assert step_wait_s(TraceRecord(14.0, 4, 1, session="s", gap_s=1.0), previous, speed=1.0) == 1.0
    assert step_wait_s(TraceRecord(14.0, 4, 1, session="s", gap_s=1.0), previous, speed=4.0) == 0.25
    assert step_wait_s(TraceRecord(14.0, 4, 1, session="s", gap_s=0.0), previous, speed=1.0) == 0.0
    assert step_wait_s(TraceRecord(14.0, 4, 1, session="s"), previous, speed=2.0) == 2.0   # no gap_s: old rule


@pytest.fixture
def gateway():
    gateway = start_fake_gateway()
    yield gateway
    gateway.stop()


def _replay(records, gateway, **options):
    return asyncio.run(asyncio.wait_for(
        replay(records, TraceHeader(block_size=4), ReplayOptions(gateway.base_url, "k", model="m", progress=False,
                                                                 **options)), timeout=60))


def test_a_later_step_with_gap_s_is_sent_its_gap_after_the_reply_not_the_recorded_inter_arrival(gateway):
    """Recorded: a 600 s reply, then no tool time at all. The old rule waited 600 s (the
    recorded reply again, after the live one); `gap_s` 0 sends step 1 at once."""
    records = [TraceRecord(0.0, 4, 1, session="s"), TraceRecord(600.0, 8, 1, session="s", after="user", gap_s=0.0)]
    outcome = _replay(records, gateway)
    assert not outcome.interrupted and len(gateway.bodies) == 2
    assert [r.step_index for r in outcome.results] == [0, 1] and all(r.error is None for r in outcome.results)
    assert outcome.wall_s < 30


def test_each_result_says_how_late_it_was_sent_and_a_full_concurrency_slot_makes_it_late(gateway):
    gateway.hold_s = 0.5   # each answer takes 0.5 s; with one slot the second line waits for it
    records = [TraceRecord(0.0, 4, 1), TraceRecord(0.0, 4, 1)]
    outcome = _replay(records, gateway, concurrency=1)
    assert all(r.send_lag_s is not None for r in outcome.results)   # every replayed request says how late
    later = max(outcome.results, key=lambda r: r.sent_at_s)
    assert later.send_lag_s >= 0.45 and later.ttft_s < later.send_lag_s + 10   # TTFT counts from the send
    total = build_report(outcome.results, outcome.wall_s)["total"]
    assert total["requests_sent_late"] >= 1 and total["send_lag_max_s"] >= 0.45
    assert total["send_lag_p99_s"] > LATE_SEND_S
    assert "raise --concurrency" in late_send_warning(build_report(outcome.results, outcome.wall_s))
