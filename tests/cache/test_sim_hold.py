"""The simulator's `hold` mode (`--hold`): a request keeps its blocks from its arrival
until it ends (TTFT, then its output at `decode_s_per_token`), so requests in flight fill
the hot tier as on a worker. Known answers on hand-drawn layouts, and the invariant that
a request costing no time holds nothing: the result is the default mode's."""
from __future__ import annotations

import dataclasses
import json

import pytest

from cache.sim.cli import main
from cache.sim.cost_model import DECODE_S_PER_TOKEN, CostModel
from cache.sim.replay import SimConfig, replay
from cache.sim.requests import to_sim_requests
from cache.tiers import Tier
from cache.trace_format import TraceHeader, TraceRecord, write_trace
from tests.cache.test_sim import random_records

BLOCK = 4
FREE = CostModel(prefill_s_per_token=0.0, request_overhead_s=0.0, host_to_hot_s_per_block=0.0,
                 decode_s_per_token=0.0)
ONE_S_PER_TOKEN = dataclasses.replace(FREE, decode_s_per_token=1.0)   # a request ends after its output alone


def _request(t: float, hash_ids: list[int], output_tokens: int = 0):
    return TraceRecord(t=t, input_tokens=len(hash_ids) * BLOCK, output_tokens=output_tokens, tenant="a",
                       session=f"s{t}", hash_ids=hash_ids)


# r0 fills the 4-block hot tier and runs until t = 10; r1..r4 share a 2-block prompt
LAYOUT = [_request(0.0, [1, 2, 3, 4], output_tokens=10), _request(1.0, [5, 6]), _request(2.0, [5, 6]),
          _request(11.0, [5, 6]), _request(12.0, [5, 6])]


def _per_request(records, config: SimConfig) -> tuple[list[tuple[int, int]], list[int], object]:
    """Each request's (hot, host) hit blocks and the blocks referenced after it, from the
    tenant's counters; and the manager, for a look after the replay."""
    hits: list[tuple[int, int]] = []
    referenced: list[int] = []
    seen = [0, 0]
    managers = []

    def after(i, manager) -> None:
        stats = manager.stats()
        tenant = stats.tenants["a"]
        hot, host = tenant.num_hot_hit_tokens // BLOCK, tenant.num_host_hit_tokens // BLOCK
        hits.append((hot - seen[0], host - seen[1]))
        seen[:] = [hot, host]
        referenced.append(stats.num_referenced_blocks)
        managers[:] = [manager]

    replay(to_sim_requests(records, BLOCK), config, on_request=after)
    return hits, referenced, managers[0]


def test_a_request_finds_no_room_while_another_runs_and_does_once_it_ended() -> None:
    config = SimConfig(num_hot_blocks=4, block_size=BLOCK, cost=ONE_S_PER_TOKEN, hold=True)
    hits, referenced, manager = _per_request(LAYOUT, config)
    # r1 and r2 arrive while r0 holds every hot block: nothing of theirs can be cached;
    # r3 arrives after r0 ended (t = 10) and caches the prompt, which r4 then hits
    assert hits == [(0, 0), (0, 0), (0, 0), (0, 0), (2, 0)]
    assert referenced == [4, 4, 4, 0, 0]   # r0's blocks until its end; r1..r4 cost no time, so hold none
    stats = manager.stats()
    assert stats.num_referenced_blocks == 0
    hot = stats.tiers[Tier.HOT]
    assert hot.num_free_blocks + hot.num_used_blocks == hot.num_blocks == 4


def test_without_hold_the_same_layout_has_no_concurrency() -> None:
    config = SimConfig(num_hot_blocks=4, block_size=BLOCK, cost=ONE_S_PER_TOKEN)
    hits, referenced, _ = _per_request(LAYOUT, config)
    assert hits == [(0, 0), (0, 0), (2, 0), (2, 0), (2, 0)]
    assert referenced == [0, 0, 0, 0, 0]


def test_a_host_tier_takes_the_blocks_hot_has_no_room_for() -> None:
    """As a worker since FI95: r1's commit, finding HOT full of r0's blocks, writes its
    blocks to HOST; r3, after r0 ended, finds them there and promotes them."""
    records = [LAYOUT[0], LAYOUT[1], _request(11.0, [5, 6])]
    config = SimConfig(num_hot_blocks=4, num_host_blocks=4, block_size=BLOCK, cost=ONE_S_PER_TOKEN, hold=True)
    hits, _, manager = _per_request(records, config)
    assert hits == [(0, 0), (0, 0), (0, 2)]
    assert manager.stats().num_host_commits == 2


def test_a_host_match_hot_has_no_room_for_is_read_through_as_host_hits() -> None:
    """r2 arrives while r0 still holds every HOT block: its prompt, written to HOST by r1,
    cannot be promoted, and is read straight from HOST (`acquire_run`): 2 host hits, where
    promotion alone lost the match and recomputed it."""
    records = [LAYOUT[0], LAYOUT[1], LAYOUT[2]]
    config = SimConfig(num_hot_blocks=4, num_host_blocks=4, block_size=BLOCK, cost=ONE_S_PER_TOKEN, hold=True)
    hits, referenced, manager = _per_request(records, config)
    assert hits == [(0, 0), (0, 0), (0, 2)]
    assert referenced == [4, 4, 4]   # r0's alone: the HOST blocks were let go once read
    assert manager.stats().tiers[Tier.HOST].num_cached_blocks == 2   # still there, for the next request


def test_requests_are_released_in_end_order_with_the_clock_at_each_end() -> None:
    """r1 arrives after r0 but ends first (t = 3 against 5): its blocks are released
    first, so LRU evicts them first when r2 needs room, and r0's survive for r3."""
    records = [_request(0.0, [1, 2], output_tokens=5), _request(1.0, [3, 4], output_tokens=2),
               _request(10.0, [5, 6]), _request(11.0, [1, 2]), _request(12.0, [3, 4])]
    requests = to_sim_requests(records, BLOCK)
    config = SimConfig(num_hot_blocks=4, block_size=BLOCK, cost=ONE_S_PER_TOKEN, hold=True)
    released_at: list[float] = []

    def after(i, manager) -> None:
        if i == 2:   # r0's blocks, released at r0's end, not at r2's arrival
            released_at.extend(manager.find(block_hash).last_access_s for block_hash in requests[0].hashes)

    hits, _, _ = _per_request(records, config)
    replay(requests, config, on_request=after)
    assert hits == [(0, 0), (0, 0), (0, 0), (2, 0), (0, 0)]
    assert released_at == [5.0, 5.0]


@pytest.mark.parametrize("policy", ["lru", "predictive", "ttl", "kvflow", "belady"])
@pytest.mark.parametrize("host_blocks", [0, 12])
def test_hold_costing_no_time_is_the_default_mode(policy: str, host_blocks: int) -> None:
    """(No request there has more blocks than the hot tier: only such a one could write
    through to HOST with nothing in flight, which the default mode never does.)"""
    requests = to_sim_requests(random_records(seed=3, num_requests=300), BLOCK)
    assert max(len(request.hashes) for request in requests) <= 24
    config = SimConfig(num_hot_blocks=24, num_host_blocks=host_blocks, policy=policy, block_size=BLOCK, cost=FREE,
                       measure_from=50)
    default = replay(requests, config).to_json()
    held = replay(requests, dataclasses.replace(config, hold=True)).to_json()
    assert held.pop("hold") is True and held.pop("decode_s_per_token") == 0.0
    default.pop("wall_s"), held.pop("wall_s")
    assert held == default


@pytest.mark.parametrize("policy", ["lru", "predictive"])
def test_hold_on_a_random_trace_changes_the_hits_and_releases_everything(policy: str) -> None:
    requests = to_sim_requests(random_records(seed=4, num_requests=300), BLOCK)
    config = SimConfig(num_hot_blocks=24, num_host_blocks=24, policy=policy, block_size=BLOCK,
                       cost=CostModel.for_block_size(BLOCK, decode_s_per_token=0.2))
    managers = []
    held = replay(requests, dataclasses.replace(config, hold=True),
                  on_request=lambda i, manager: managers.append(manager) if i == 0 else None)
    default = replay(requests, config)
    assert held.totals.num_hot_hit_blocks != default.totals.num_hot_hit_blocks   # requests overlapped
    stats = managers[0].stats()
    assert stats.num_referenced_blocks == 0
    for tier in Tier:
        counts = stats.tiers[tier]
        assert counts.num_free_blocks + counts.num_used_blocks == counts.num_blocks


def test_cost_model_end_and_default_decode() -> None:
    cost = CostModel.for_block_size(16)
    assert cost.decode_s_per_token == DECODE_S_PER_TOKEN == 0.0592
    assert CostModel.for_block_size(16, calibration="float32").decode_s_per_token == DECODE_S_PER_TOKEN
    assert CostModel.for_block_size(16, decode_s_per_token=0.5).end_s(10.0, 1.5, 4) == 10.0 + 1.5 + 2.0
    with pytest.raises(ValueError):
        CostModel(decode_s_per_token=-1.0)


def _trace(tmp_path) -> str:
    path = tmp_path / "trace.jsonl"
    with open(path, "w", encoding="utf-8") as stream:
        write_trace(stream, random_records(seed=5, num_requests=60, block_size=16), TraceHeader(block_size=16))
    return str(path)


def test_cli_hold_says_so_in_its_line_and_the_default_line_does_not(tmp_path, capsys) -> None:
    trace = _trace(tmp_path)
    assert main(["--trace", trace, "--hot-blocks", "8", "--json"]) == 0
    default = json.loads(capsys.readouterr().out)
    assert "hold" not in default and "decode_s_per_token" not in default
    assert main(["--trace", trace, "--hot-blocks", "8", "--hold", "--decode-s-per-token", "0.5", "--json"]) == 0
    held = json.loads(capsys.readouterr().out)
    assert held["hold"] is True and held["decode_s_per_token"] == 0.5
    assert main(["--trace", trace, "--hot-blocks", "8", "--hold", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["decode_s_per_token"] == DECODE_S_PER_TOKEN


def test_cli_decode_seconds_without_hold_is_a_usage_error(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--trace", _trace(tmp_path), "--hot-blocks", "8", "--decode-s-per-token", "0.5"])
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and captured.out == ""
    assert captured.err.splitlines()[-1] == (
        "python -m cache.sim: error: argument --decode-s-per-token: only with --hold (it sets how long a request "
        "holds its blocks)")
