"""Known answers for a prefix copy between workers and the tokens a cached run saves
(shards/transfer_decision.py)."""
from __future__ import annotations

import dataclasses

from shards.prefix_index import PrefixRun
from shards.route_records import RouteQuery, RouterConfig, WorkerCosts
from shards.transfer_decision import decide_transfer, saved_tokens

CONFIG = RouterConfig(block_size=16, host_hit_weight=0.5, min_transfer_blocks=2)
QUERY = RouteQuery("t", None, [], 200)


def _costs(prefill_s_per_token=0.001, export_s=0.002, import_s=0.002, round_trip_s=0.002):
    measured = WorkerCosts(prefill_s_per_token, export_s, import_s, round_trip_s)
    return {"w0": measured, "w1": dataclasses.replace(measured)}


def test_saved_tokens_counts_hot_blocks_whole_host_blocks_at_their_weight_and_never_the_last_token():
    assert saved_tokens(CONFIG, PrefixRun(3, 2), 200) == 3 * 16 + 0.5 * 2 * 16 == 64
    assert saved_tokens(CONFIG, PrefixRun(20, 0), 200) == 199   # the last prompt token is computed
    assert saved_tokens(CONFIG, PrefixRun(0, 0), 1) == 0


def test_a_copy_cheaper_than_the_prefill_it_saves_is_proposed():
    """w0 holds 10 hot blocks, w1 (chosen) 1: copying 9 blocks costs 9 x 4 ms + 2 ms,
    prefilling their 144 tokens 144 ms."""
    runs = {"w0": PrefixRun(10, 0), "w1": PrefixRun(1, 0)}
    decision = decide_transfer(CONFIG, _costs(), "w1", "least_loaded", runs, QUERY)
    assert (decision.worker_id, decision.transfer_from, decision.num_transfer_blocks) == ("w1", "w0", 10)
    assert decision.num_expected_cached_tokens == 160 and decision.num_prefill_tokens == 40
    assert abs(decision.transfer_saves_s - 0.144) < 1e-9


def test_no_copy_when_it_costs_more_is_unmeasured_too_small_or_turned_off():
    runs = {"w0": PrefixRun(10, 0), "w1": PrefixRun(1, 0)}
    dear = decide_transfer(CONFIG, _costs(prefill_s_per_token=0.0001), "w1", "least_loaded", runs, QUERY)
    unmeasured = decide_transfer(CONFIG, _costs(export_s=None), "w1", "least_loaded", runs, QUERY)
    small = decide_transfer(CONFIG, _costs(), "w1", "least_loaded", {"w0": PrefixRun(2, 0), "w1": PrefixRun(1, 0)}, QUERY)
    off = decide_transfer(dataclasses.replace(CONFIG, can_transfer=False), _costs(), "w1", "least_loaded", runs, QUERY)
    for decision in (dear, unmeasured, off):
        assert decision.transfer_from is None and decision.num_expected_cached_tokens == 16
    assert small.transfer_from is None


def test_a_copy_starts_past_the_blocks_the_chosen_worker_holds_in_either_tier():
    """w1 holds 3 hot and 2 host blocks of w0's 12: the copy is blocks 5-11, the 7 costed."""
    runs = {"w0": PrefixRun(12, 0), "w1": PrefixRun(3, 2)}
    decision = decide_transfer(CONFIG, _costs(), "w1", "least_loaded", runs, QUERY)
    assert (decision.transfer_from, decision.transfer_first_block, decision.num_transfer_blocks) == ("w0", 5, 12)
    assert abs(decision.transfer_saves_s - 7 * 16 * 0.001) < 1e-9
    alone = decide_transfer(CONFIG, _costs(), "w1", "least_loaded", {"w0": PrefixRun(12, 0), "w1": PrefixRun()},
                            QUERY)
    assert (alone.transfer_first_block, alone.num_transfer_blocks) == (0, 12)
