"""bench_truncation's baseline (one turn cut at a time) and the gateway's search find the
same number of turns and the same outcome for every threshold, refusals included, and
its conversation is whole turns ending with a user message."""
import asyncio

import pytest

from benchmarks.bench_truncation import conversation, one_turn_at_a_time
from gateway.errors import invalid_request
from gateway.responses_truncation import TurnCuts, fewest_turns_cut


@pytest.mark.parametrize("num_turns", [1, 2, 7, 64])
def test_the_baseline_and_the_search_agree(num_turns):
    cuts = TurnCuts(1, tuple(range(2, 2 + num_turns)))
    for fits_from in [*range(1, num_turns + 1), None]:
        for refused_at in (None, fits_from):
            async def outcome_of(num_cut: int):
                if fits_from is None or num_cut < fits_from:
                    raise invalid_request("too long", param="messages", code="context_length_exceeded")
                if num_cut == refused_at:
                    raise invalid_request("other", param="messages")
                return num_cut
            found = [asyncio.run(search(cuts, outcome_of)) for search in (one_turn_at_a_time, fewest_turns_cut)]
            assert found[0][0] == found[1][0] == (fits_from or num_turns)
            assert repr(found[0][1]) == repr(found[1][1])


def test_the_conversation_is_whole_turns():
    items = conversation(3)
    assert [item["role"] for item in items] == ["user", "assistant"] * 3 + ["user"]
    assert TurnCuts.of(items).ends == (2, 4, 6)
