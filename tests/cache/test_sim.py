"""The trace simulator: LRU against a reference model, Belady as the bound, the CLI line."""
from __future__ import annotations

import dataclasses
import json
import math
import random
from collections import OrderedDict
from pathlib import Path

import pytest

from cache.sim.cli import main
from cache.sim.cost_model import DEFAULT_CALIBRATION, CostModel
from cache.sim.oracle import next_uses
from cache.sim.replay import SimConfig, replay, split_index
from cache.sim.requests import SimRequest, to_sim_requests
from cache.tiers import Tier
from cache.trace_format import TraceHeader, TraceRecord, write_trace

REQUIRED_KEYS = {"policy", "hot_blocks", "host_blocks", "requests", "block_hit_rate", "token_hit_rate",
                 "host_hit_rate", "sim_ttft_p50_s", "sim_ttft_p99_s", "prefetch_used_frac", "wall_s"}


def random_records(seed: int, num_requests: int = 400, block_size: int = 4) -> list[TraceRecord]:
    """Conversations that extend themselves, branch now and then, share a system prompt
    per tenant, and sometimes send a one-off prompt."""
    rng = random.Random(seed)
    next_id = [0]

    def new_id() -> int:
        next_id[0] += 1
        return next_id[0]

    system = {tenant: [new_id() for _ in range(2)] for tenant in ("a", "b")}
    live: list[tuple[str, list[int]]] = []
    records = []
    t = 0.0
    for _ in range(num_requests):
        t += rng.expovariate(2.0)
        if live and rng.random() < 0.7:
            tenant, ids = rng.choice(live)
            if rng.random() < 0.1:
                ids = ids[: rng.randrange(1, len(ids) + 1)]
                live.append((tenant, ids))
            ids.extend(new_id() for _ in range(rng.randrange(1, 4)))
        else:
            tenant = rng.choice("ab")
            ids = list(system[tenant]) + [new_id() for _ in range(rng.randrange(0, 5))]
            live.append((tenant, ids))
        num_tokens = len(ids) * block_size - rng.randrange(0, block_size)
        records.append(TraceRecord(t=t, input_tokens=num_tokens, output_tokens=5, tenant=tenant,
                                   hash_ids=list(ids)))
    return records


def reference_lru(requests: list[SimRequest], capacity: int) -> tuple[list[int], int]:
    """Per-request leading-run hits and the eviction count of a plain LRU over block
    hashes, with the manager's protocol: hits are referenced, misses are added one by
    one (evicting the least recently released unreferenced block), then the request's
    blocks are released tail first."""
    evictable: OrderedDict[int, None] = OrderedDict()
    cached: set[int] = set()
    hits: list[int] = []
    num_evictions = 0
    for request in requests:
        hashes = request.hashes
        k = 0
        while k < len(hashes) and hashes[k] in cached:
            k += 1
        hits.append(k)
        held = list(hashes[:k])
        for block_hash in held:
            evictable.pop(block_hash, None)
        for block_hash in hashes[k:]:
            if len(cached) >= capacity:
                if not evictable:
                    break
                victim, _ = evictable.popitem(last=False)
                cached.discard(victim)
                num_evictions += 1
            cached.add(block_hash)
            held.append(block_hash)
        for block_hash in reversed(held):
            evictable[block_hash] = None
            evictable.move_to_end(block_hash)
    return hits, num_evictions


@pytest.mark.parametrize("capacity", [6, 20, 60])
def test_sim_lru_matches_reference_on_random_trace(capacity: int) -> None:
    requests = to_sim_requests(random_records(seed=capacity), block_size=4)
    expected_hits, expected_evictions = reference_lru(requests, capacity)
    seen_hits: list[int] = []

    def record(i: int, manager) -> None:
        stats = manager.stats().overall()
        seen_hits.append(stats.num_hot_hit_tokens + stats.num_host_hit_tokens)

    result = replay(requests, SimConfig(num_hot_blocks=capacity, policy="lru", block_size=4), on_request=record)
    per_request = [seen_hits[0]] + [b - a for a, b in zip(seen_hits, seen_hits[1:])]
    expected_tokens = [min(h * 4, r.num_prompt_tokens) for h, r in zip(expected_hits, requests)]
    assert per_request == expected_tokens
    assert result.num_evictions == expected_evictions
    assert result.totals.num_hot_hit_blocks == sum(expected_hits)


def test_sim_belady_bounds_lru_and_predictive_on_random_traces() -> None:
    for seed in range(3):
        requests = to_sim_requests(random_records(seed, num_requests=600), block_size=4)
        rates = {policy: replay(requests, SimConfig(num_hot_blocks=25, policy=policy, block_size=4)).to_json()["block_hit_rate"]
                 for policy in ("lru", "predictive", "belady")}
        assert rates["belady"] >= max(rates["lru"], rates["predictive"]), rates


@pytest.mark.parametrize("anchor", ["ttl", "kvflow"])
def test_sim_anchors_are_lru_on_traces_without_tool_calls(anchor: str) -> None:
    """Told nothing but text answers, the anchors evict exactly as LRU does."""
    for seed in range(2):
        requests = to_sim_requests(random_records(seed, num_requests=400), block_size=4)
        results = [replay(requests, SimConfig(num_hot_blocks=20, num_host_blocks=host, policy=policy, block_size=4))
                   for policy in ("lru", anchor) for host in (0, 10)]
        lru, lru_host, other, other_host = results
        assert other.totals.num_hot_hit_blocks == lru.totals.num_hot_hit_blocks
        assert other.num_evictions == lru.num_evictions
        assert other_host.totals.num_host_hit_blocks == lru_host.totals.num_host_hit_blocks > 0


def test_sim_next_uses_are_request_indices() -> None:
    records = [TraceRecord(t=0.0, input_tokens=8, output_tokens=1, hash_ids=[1, 2]),
               TraceRecord(t=0.0, input_tokens=4, output_tokens=1, hash_ids=[1]),
               TraceRecord(t=1.0, input_tokens=8, output_tokens=1, hash_ids=[1, 2]),
               TraceRecord(t=2.0, input_tokens=8, output_tokens=1, tenant="other", hash_ids=[1, 2])]
    assert next_uses(to_sim_requests(records, 4)) == [[1.0, 2.0], [2.0], [math.inf, math.inf], [math.inf, math.inf]]


def test_sim_requests_cache_full_blocks_only_and_scope_hashes_by_tenant() -> None:
    records = [TraceRecord(t=0.0, input_tokens=10, output_tokens=1, tenant="a", hash_ids=[7, 8, 9]),
               TraceRecord(t=1.0, input_tokens=8, output_tokens=1, tenant="b", hash_ids=[7, 8])]
    first, second = to_sim_requests(records, 4)
    assert (first.num_blocks, len(first.hashes)) == (3, 2)
    assert not set(first.hashes) & set(second.hashes)


def test_sim_infers_sessions_and_counts_costs() -> None:
    """A Mooncake-style trace (no sessions): the second turn hits the first turn's full
    blocks; its TTFT is the overhead plus the uncached tokens."""
    records = [TraceRecord(t=0.0, input_tokens=10, output_tokens=1, hash_ids=[1, 2, 3]),
               TraceRecord(t=5.0, input_tokens=14, output_tokens=1, hash_ids=[1, 2, 4, 5])]
    cost = CostModel(prefill_s_per_token=0.01, request_overhead_s=0.5, host_to_hot_s_per_block=0.0)
    for policy in ("lru", "predictive", "belady"):
        result = replay(to_sim_requests(records, 4), SimConfig(num_hot_blocks=10, policy=policy, block_size=4, cost=cost))
        assert result.totals.num_hot_hit_blocks == 2
        assert result.totals.ttfts_s == pytest.approx([0.5 + 0.10, 0.5 + 0.06])


def test_sim_measure_from_skips_the_warm_up() -> None:
    requests = to_sim_requests(random_records(seed=5), block_size=4)
    start = split_index(len(requests), 0.5)
    result = replay(requests, SimConfig(num_hot_blocks=30, policy="lru", block_size=4, measure_from=start))
    assert result.totals.num_requests == len(requests) - start


def test_sim_host_tier_serves_host_hits() -> None:
    requests = to_sim_requests(random_records(seed=9, num_requests=500), block_size=4)
    for policy in ("lru", "predictive", "belady"):
        data = replay(requests, SimConfig(num_hot_blocks=12, num_host_blocks=40, policy=policy, block_size=4)).to_json()
        assert data["host_hit_rate"] > 0
        assert data["block_hit_rate"] >= data["host_hit_rate"]


@pytest.mark.parametrize("mooncake", [False, True])
def test_sim_cli_prints_one_json_line(tmp_path, capsys, mooncake: bool) -> None:
    path = tmp_path / "trace.jsonl"
    records = random_records(seed=1, num_requests=60, block_size=512)
    if mooncake:
        path.write_text("".join(json.dumps({"timestamp": int(r.t * 1000), "input_length": r.input_tokens,
                                            "output_length": r.output_tokens, "hash_ids": r.hash_ids}) + "\n"
                                for r in records))
    else:
        with open(path, "w", encoding="utf-8") as stream:
            write_trace(stream, records, TraceHeader(block_size=512))
    for policy in ("lru", "predictive", "ttl", "kvflow", "belady"):
        assert main(["--trace", str(path), "--hot-blocks", "16", "--host-blocks", "8", "--policy", policy, "--json"]) == 0
        lines = capsys.readouterr().out.strip().splitlines()
        assert len(lines) == 1
        data = json.loads(lines[0])
        assert REQUIRED_KEYS <= set(data)
        assert (data["policy"], data["hot_blocks"], data["host_blocks"], data["requests"]) == (policy, 16, 8, 60)
        assert 0.0 <= data["host_hit_rate"] <= data["block_hit_rate"] <= 1.0
        assert data["sim_ttft_p50_s"] <= data["sim_ttft_p99_s"]


def test_cost_calibrations_known_answers_and_overrides() -> None:
    float32 = CostModel.for_block_size(512, calibration="float32")
    assert float32 == CostModel(1.553e-3, 0.06, 512 * 46_080 / 1e10)
    bfloat16 = CostModel.for_block_size(512)  # the default: the engine's dtype "auto" here
    assert bfloat16 == CostModel.for_block_size(512, calibration=DEFAULT_CALIBRATION)
    assert bfloat16.host_to_hot_s_per_block == pytest.approx(float32.host_to_hot_s_per_block / 2)
    assert bfloat16.prefill_s_per_token < float32.prefill_s_per_token
    assert CostModel() == CostModel.for_block_size(16)
    given = CostModel.for_block_size(16, calibration="float32", request_overhead_s=0.5, kv_bytes_per_token=10)
    assert given == CostModel(1.553e-3, 0.5, 16 * 10 / 1e10)
    with pytest.raises(ValueError, match="unknown calibration 'fp8': use one of bfloat16, float32"):
        CostModel.for_block_size(16, calibration="fp8")


def test_sim_cli_calibration_changes_costs_not_hits(tmp_path, capsys) -> None:
    path = tmp_path / "trace.jsonl"
    with open(path, "w", encoding="utf-8") as stream:
        write_trace(stream, random_records(seed=3, num_requests=80, block_size=512), TraceHeader(block_size=512))
    out = {}
    for calibration in ("bfloat16", "float32"):
        assert main(["--trace", str(path), "--hot-blocks", "16", "--policy", "lru",
                     "--calibration", calibration, "--json"]) == 0
        out[calibration] = json.loads(capsys.readouterr().out)
    assert [out[c]["calibration"] for c in out] == ["bfloat16", "float32"]
    assert out["bfloat16"]["block_hit_rate"] == out["float32"]["block_hit_rate"]
    assert out["bfloat16"]["sim_ttft_p50_s"] < out["float32"]["sim_ttft_p50_s"]
    with pytest.raises(SystemExit):
        main(["--trace", str(path), "--hot-blocks", "16", "--calibration", "fp8", "--json"])


def test_sim_cli_bad_input_is_an_error_line_not_a_traceback(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"bad": 1}\n')
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    good = tmp_path / "good.jsonl"
    with open(good, "w", encoding="utf-8") as stream:
        write_trace(stream, random_records(seed=3, num_requests=5, block_size=16), TraceHeader(block_size=16))
    cases = [([str(tmp_path / "missing.jsonl")], "cannot read"), ([str(tmp_path)], "cannot read"),
             ([str(bad)], "cannot read"), ([str(empty)], "holds no requests")]
    for args, message in cases:
        assert main(["--trace", *args, "--hot-blocks", "16", "--json"]) == 2
        captured = capsys.readouterr()
        assert message in captured.err and captured.out == ""


def _agent_and_batch_trace() -> list[TraceRecord]:
    """An agent session of 4 blocks coming back every 10 s, and a flex batch line of 4
    fresh blocks every 2 s between (no session: the Batch API's)."""
    records = []
    for step in range(5):
        records.append(TraceRecord(t=10.0 * step, input_tokens=16 * (4 + step), output_tokens=1, tenant="t",
                                   session="agent", hash_ids=list(range(1, 5 + step))))
        for n in range(1, 5):
            base = 1000 + 100 * (4 * step + n)
            records.append(TraceRecord(t=10.0 * step + 2.0 * n, input_tokens=64, output_tokens=1, tenant="t",
                                       hash_ids=list(range(base, base + 4)), service_tier="flex"))
    return records


@pytest.mark.parametrize("policy", ["lru", "predictive"])
def test_sim_flex_requests_blocks_go_first_and_the_agents_are_counted_apart(policy: str) -> None:
    requests = to_sim_requests(_agent_and_batch_trace(), 16)
    assert sum(request.flex for request in requests) == 20

    def run(flex_first: bool) -> dict:
        return replay(requests, SimConfig(num_hot_blocks=12, policy=policy, block_size=16,
                                          flex_first=flex_first)).to_json()
    first, mixed = run(True), run(False)
    assert first["flex_requests"] == mixed["flex_requests"] == 20
    # the agent's 4..8 blocks survive each tool wait with flex first: every later step hits its prefix
    assert first["interactive_block_hit_rate"] == pytest.approx((4 + 5 + 6 + 7) / (4 + 5 + 6 + 7 + 8))
    assert mixed["interactive_block_hit_rate"] < first["interactive_block_hit_rate"]
    assert first["interactive_ttft_mean_s"] < mixed["interactive_ttft_mean_s"]
    # flex blocks leave either way, chosen first or by the policy: each eviction of one is counted
    assert first["flex_evictions"] > 0 and mixed["flex_evictions"] > 0
    assert mixed["flex_evictions"] <= mixed["evictions"]
    belady = replay(requests, SimConfig(num_hot_blocks=12, policy="belady", block_size=16)).to_json()
    # the oracle bounds every order (flex first does not apply to it), and still evicts flex blocks
    assert 0 < belady["flex_evictions"] <= belady["evictions"]


def test_sim_cli_no_flex_first_lets_flex_blocks_compete(tmp_path, capsys) -> None:
    path = tmp_path / "mix.jsonl"
    with path.open("w") as stream:
        write_trace(stream, _agent_and_batch_trace(), TraceHeader(block_size=16))
    rates = []
    for extra in ([], ["--no-flex-first"]):
        assert main(["--trace", str(path), "--hot-blocks", "12", "--json", *extra]) == 0
        rates.append(json.loads(capsys.readouterr().out)["interactive_block_hit_rate"])
    assert rates[0] > rates[1]


def _small_trace(tmp_path) -> str:
    path = tmp_path / "trace.jsonl"
    with open(path, "w", encoding="utf-8") as stream:
        write_trace(stream, random_records(seed=5, num_requests=20, block_size=16), TraceHeader(block_size=16))
    return str(path)


@pytest.mark.parametrize("flags, message", [
    (["--measure-from-frac", "1.5"], "argument --measure-from-frac: must lie in [0, 1), got '1.5'"),
    (["--measure-from-frac", "-1"], "argument --measure-from-frac: must lie in [0, 1), got '-1'"),
    (["--measure-from-frac", "1"], "argument --measure-from-frac: must lie in [0, 1), got '1'"),
    (["--prefill-s-per-token", "-1"], "argument --prefill-s-per-token: must be >= 0, got '-1'"),
    (["--prefill-s-per-token", "nan"], "argument --prefill-s-per-token: must be a finite number, got 'nan'"),
    (["--request-overhead-s", "inf"], "argument --request-overhead-s: must be a finite number, got 'inf'"),
    (["--host-to-hot-s-per-block", "-0.5"], "argument --host-to-hot-s-per-block: must be >= 0, got '-0.5'"),
    (["--kv-bytes-per-token", "-3"], "argument --kv-bytes-per-token: must be >= 0, got '-3'"),
    (["--host-blocks", "50", "--copy-bytes-per-s", "0"], "argument --copy-bytes-per-s: must be > 0, got '0'"),
    (["--tick-interval-s", "nan"], "argument --tick-interval-s: must be a finite number, got 'nan'"),
    (["--hot-blocks", "1000000000000"], "argument --hot-blocks: HOT block counts must be at most 10,000,000"),
    (["--host-blocks", "1000000000000"], "argument --host-blocks: must be at most 10,000,000"),
    (["--host-blocks", "-1"], "argument --host-blocks: must be >= 0, got '-1'"),
    (["--tick-interval-s", "1e-12", "--policy", "lru,predictive"],
     "argument --tick-interval-s: 1e-12 s makes over 10,000,000 ticks"),
    (["--block-size", "0"], "argument --block-size: must be from 1 to 10,000,000, got '0'"),
    (["--block-size", "100000000"], "argument --block-size: must be from 1 to 10,000,000, got '100000000'"),
])
def test_sim_cli_out_of_range_flags_are_one_usage_error(tmp_path, capsys, flags, message) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--trace", _small_trace(tmp_path), "--hot-blocks", "16", *flags, "--json"])
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and captured.out == ""
    assert captured.err.splitlines()[-1].startswith(f"python -m cache.sim: error: {message}")


@pytest.mark.parametrize("plot, message", [("/proc/stepahead-no/x.png", "cannot write there"),
                                           (None, "is a directory")])
def test_sim_cli_unwritable_plot_is_refused_before_the_runs(tmp_path, capsys, plot, message) -> None:
    plot = plot or str(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["--trace", _small_trace(tmp_path), "--hot-blocks", "8,16", "--plot", plot])
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and captured.out == ""   # no table: nothing ran
    assert captured.err.splitlines()[-1].startswith(f"python -m cache.sim: error: argument --plot: {plot}: {message}")


def test_sim_cli_costs_that_overflow_are_an_error_not_a_nan_line(tmp_path, capsys) -> None:
    assert main(["--trace", _small_trace(tmp_path), "--hot-blocks", "8", "--prefill-s-per-token", "1e308",
                 "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "error: the simulated times overflow to infinity: lower the cost flags\n"


def test_sim_cli_mooncake_line_with_a_bad_field_is_an_error_naming_the_line(tmp_path, capsys) -> None:
    path = tmp_path / "m.jsonl"
    for line, message in [('{"timestamp": "x", "input_length": 5, "output_length": 8, "hash_ids": [1]}',
                           "line 2: 'timestamp' must be a non-negative number of milliseconds"),
                          ('{"timestamp": 9, "input_length": 5, "output_length": 8, "hash_ids": "abc"}',
                           "line 2: 'hash_ids' must be a list of integers")]:
        path.write_text('{"timestamp": 0, "input_length": 5, "output_length": 8, "hash_ids": [1]}\n' + line + "\n")
        assert main(["--trace", str(path), "--hot-blocks", "100", "--json"]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err == f"error: cannot read {path}: {message}\n"


def test_sim_cli_block_size_reads_a_headerless_trace_and_refuses_another_than_the_headers(tmp_path, capsys) -> None:
    """--block-size is the block size of a trace without a header; one whose header names
    another is refused: its hash ids stand for the header's blocks (reading them as larger
    ones made the hit rate climb with the flag)."""
    with_header = _small_trace(tmp_path)   # blocks of 16
    assert main(["--trace", with_header, "--hot-blocks", "16", "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)
    assert main(["--trace", with_header, "--hot-blocks", "16", "--block-size", "16", "--json"]) == 0
    assert _figures(json.loads(capsys.readouterr().out)) == _figures(expected)
    for size in ("32", "64", "8"):
        assert main(["--trace", with_header, "--hot-blocks", "16", "--block-size", size, "--json"]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err == (
            f"error: --block-size {size} does not fit {with_header}: line 1: the header says its hash_ids name "
            f"blocks of 16 tokens, not {size} (leave the flag out)\n")
    headerless = tmp_path / "headerless.jsonl"
    headerless.write_text("".join(Path(with_header).read_text().splitlines(keepends=True)[1:]))
    assert main(["--trace", str(headerless), "--hot-blocks", "16", "--block-size", "16", "--json"]) == 0
    assert _figures(json.loads(capsys.readouterr().out)) == _figures(expected)
    assert main(["--trace", str(headerless), "--hot-blocks", "16", "--json"]) == 2   # read as Mooncake's 512
    assert "blocks of 512" in capsys.readouterr().err


def _figures(result: dict) -> dict:
    return {key: value for key, value in result.items() if key != "wall_s"}


def test_sim_cli_refuses_a_trace_whose_time_goes_back(tmp_path, capsys) -> None:
    records = random_records(seed=5, num_requests=20, block_size=16)
    records[7], records[8] = records[8], records[7]
    path = tmp_path / "unsorted.jsonl"
    with open(path, "w", encoding="utf-8") as stream:
        write_trace(stream, records, TraceHeader(block_size=16))
    assert main(["--trace", str(path), "--hot-blocks", "16", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"error: cannot read {path}: line 10: 't' is {round(records[8].t, 6):g} s, "
                                   f"before line 9's {round(records[7].t, 6):g} s")   # line 1: the header


@pytest.mark.parametrize("name", ["sweep.txt", "sweep.PNGX"])
def test_sim_cli_plot_in_a_format_matplotlib_cannot_draw_is_refused_before_the_runs(tmp_path, capsys, name) -> None:
    plot = tmp_path / "out" / name
    with pytest.raises(SystemExit) as exit_info:
        main(["--trace", _small_trace(tmp_path), "--hot-blocks", "8,16", "--plot", str(plot)])
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and captured.out == ""   # no table: nothing ran
    assert captured.err.splitlines()[-1].startswith(
        f"python -m cache.sim: error: argument --plot: {plot}: matplotlib cannot draw to a "
        f"'{Path(name).suffix}' file; name it .png or one of ")
    assert not plot.exists()


def test_sim_cli_plot_without_a_suffix_is_a_png_at_that_path(tmp_path, capsys) -> None:
    plot = tmp_path / "sweep"
    assert main(["--trace", _small_trace(tmp_path), "--hot-blocks", "8,16", "--plot", str(plot)]) == 0
    assert plot.read_bytes().startswith(b"\x89PNG") and not (tmp_path / "sweep.png").exists()


@pytest.mark.parametrize("policy", ["lru", "predictive", "kvflow"])
def test_sim_measure_from_counts_only_the_measured_parts_evictions_and_prefetches(policy: str) -> None:
    """Every count of the result covers the measured requests, as the hit rates do: the
    evictions are those after the warm-up's last request, and so are the prefetches."""
    from agents_trace.workload.generator import WorkloadConfig, generate_workload
    from agents_trace.workload.tool_patterns import packaged_patterns

    records = generate_workload(WorkloadConfig(num_tenants=2, num_sessions=10, seed=0), packaged_patterns())
    requests = to_sim_requests(records, block_size=16)
    start = split_index(len(requests), 0.6)
    config = SimConfig(num_hot_blocks=300, num_host_blocks=3000, policy=policy, block_size=16)
    at_start = {}

    def watch(i: int, manager) -> None:
        if i == start - 1:
            at_start["evictions"] = manager.stats().tiers[Tier.HOT].num_evictions

    whole = replay(requests, config, on_request=watch)
    measured = replay(requests, dataclasses.replace(config, measure_from=start))
    assert measured.totals.num_requests == len(requests) - start
    assert 0 < measured.num_evictions == whole.num_evictions - at_start["evictions"] < whole.num_evictions
    assert measured.num_prefetch_used_blocks <= whole.num_prefetch_used_blocks
    assert measured.num_prefetch_wasted_blocks <= whole.num_prefetch_wasted_blocks
    if policy == "lru":
        assert whole.num_prefetched_blocks == measured.num_prefetched_blocks == 0
    else:
        assert 0 < measured.num_prefetched_blocks < whole.num_prefetched_blocks


def test_sim_cli_measure_from_frac_counts_evictions_over_the_measured_part(tmp_path, capsys) -> None:
    path = _small_trace(tmp_path)
    counts = []
    for frac in ("0", "0.9"):
        assert main(["--trace", path, "--hot-blocks", "8", "--measure-from-frac", frac, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        counts.append((data["requests"], data["evictions"]))
    (all_requests, all_evictions), (some_requests, some_evictions) = counts
    assert (all_requests, some_requests) == (20, 2)
    assert some_evictions < all_evictions
