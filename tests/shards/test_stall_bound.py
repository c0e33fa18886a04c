"""The stall bound's rules on hand-set waits: who rides the next chunk, when chunks yield."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from shards.stall_bound import StallBound


@dataclass
class Seq:
    name: str
    last_token_s: float


NOW = 100.0
RUNNING = [Seq("c", NOW - 0.3), Seq("b", NOW - 0.5), Seq("a", NOW - 1.0)]


@pytest.mark.parametrize("max_riders, riders", [(4, ["a", "b"]), (1, ["a"])])
def test_riders_are_due_before_their_next_chance_longest_waiting_first(max_riders, riders):
    """Bound 1.0 s, chunks of 0.3 s: the next chance after this chunk ends 0.6 s from now;
    "a" (idle 1.0 s) and "b" (0.5 s) would pass the bound by then, "c" (0.3 s) not."""
    stall = StallBound(1.0)
    stall.chunk_done(0.3, NOW - 0.3)
    assert [seq.name for seq in stall.riders(RUNNING, NOW, max_riders)] == riders


def test_without_a_bound_nothing_is_due():
    stall = StallBound(None)
    stall.chunk_done(0.3, NOW - 0.3)
    assert stall.riders(RUNNING, NOW, 8) == [] and not stall.must_yield(RUNNING, NOW)


def test_a_chunk_yields_only_for_a_request_not_decoded_since_the_last_chunk():
    stall = StallBound(0.5)
    stall.chunk_done(0.3, NOW - 0.6)  # "c" was decoded after that chunk, "a" and "b" before
    assert stall.must_yield(RUNNING, NOW)  # "a": 1.0 + 0.3 >= 0.5
    assert not stall.must_yield([Seq("c", NOW - 0.3)], NOW)  # decoded since: the chunk goes first
    stall.chunk_done(0.3, NOW)
    assert stall.must_yield([Seq("c", NOW - 0.3)], NOW)  # now it waited through a chunk


def test_chunk_duration_is_smoothed():
    stall = StallBound(1.0)
    stall.chunk_done(0.4, 1.0)
    stall.chunk_done(0.2, 2.0)
    assert stall.chunk_s == pytest.approx(0.7 * 0.4 + 0.3 * 0.2)
    assert stall.chunk_ended_s == 2.0
