from __future__ import annotations

from benchmarks.e2e_capacity import capacity_sweep, plot, simulate, sweep_counts, sweep_points, tenant_homes
from cache.trace_format import TraceRecord


class _Config:
    block_size = 16


def test_sweep_counts_steps_and_always_ends_at_the_maximum():
    assert sweep_counts(8, 2) == [2, 4, 6, 8]
    assert sweep_counts(7, 3) == [3, 6, 7]
    assert sweep_counts(3, 1) == [1, 2, 3]
    assert sweep_counts(2, 5) == [2]
    assert sweep_counts(9, 1, start=6) == [6, 7, 8, 9]
    assert sweep_counts(10, 2, start=5) == [5, 7, 9, 10]


def test_capacity_sweep_largest_count_under_the_slo_and_stops_a_policy_past_it():
    p99 = {("predictive", 1): 0.5, ("predictive", 2): 0.9, ("predictive", 3): 1.5,
           ("lru", 1): 0.7, ("lru", 2): 1.2}
    calls = []

    def run(policy, records, header):
        calls.append((policy, len(records)))
        return {"total": {"ttft_p99_s": p99[(policy, len(records))], "ttft_mean_s": 0.1,
                          "cached_token_share": 0.5}}

    out = capacity_sweep([1, 2, 3, 4], 1.0, lambda n: (_Config(), [None] * n), run)
    assert out["max_tenants"] == {"predictive": 2, "lru": 1}
    assert out["predictive_over_lru_tenants"] == 2.0
    # lru is not run past its first miss; the sweep ends once both have missed
    assert calls == [("predictive", 1), ("lru", 1), ("predictive", 2), ("lru", 2),
                     ("predictive", 3)]
    assert out["p99_ttft_by_tenants"]["lru"][3] is None


def test_capacity_sweep_with_repeats_takes_each_points_median_and_alternates_order():
    p99 = {("predictive", 1): [0.5, 0.6, 0.4], ("lru", 1): [0.7, 0.9, 0.8],
           ("predictive", 2): [0.9, 1.4, 0.95], ("lru", 2): [1.1, 0.8, 1.3],
           ("predictive", 3): [1.2, 2.0, 1.1]}
    calls = []

    def run(policy, records, header):
        n = len(records)
        calls.append((policy, n))
        value = p99[(policy, n)][sum(1 for c in calls if c == (policy, n)) - 1]
        return {"total": {"ttft_p99_s": value, "ttft_mean_s": 0.1, "cached_token_share": 0.5}}

    out = capacity_sweep([1, 2, 3], 1.0, lambda n: (_Config(), [None] * n), run, repeats=3)
    # medians: predictive 0.5, 0.95, 1.2 -> 2 tenants; lru 0.8, 1.1 -> 1 tenant
    assert out["max_tenants"] == {"predictive": 2, "lru": 1}
    assert out["p99_ttft_by_tenants"]["predictive"][2] == 0.95
    assert out["p99_ttft_by_tenants"]["lru"][2] == 1.1
    assert out["p99_runs_by_tenants"]["lru"][2] == [1.1, 0.8, 1.3]
    assert out["repeats_per_point"] == 3
    # each point: as given, reversed, as given; lru is not run at 3 after missing at 2
    assert calls[:6] == [("predictive", 1), ("lru", 1), ("lru", 1), ("predictive", 1),
                         ("predictive", 1), ("lru", 1)]
    assert calls[12:] == [("predictive", 3)] * 3


def test_simulate_reports_every_policy_on_a_small_trace():
    records = [TraceRecord(float(i), 64, 1, tenant="t", session=f"s{i % 2}",
                           hash_ids=list(range(i % 2 * 10, i % 2 * 10 + 4))) for i in range(6)]
    out = simulate(records, 16, 8)
    assert set(out) == {"lru", "predictive", "ttl", "kvflow", "belady"}
    assert all(0.0 <= row["block_hit_rate"] <= 1.0 for row in out.values())


def test_tenant_homes_fill_the_worker_with_fewest_tenants_in_order_of_arrival():
    assert tenant_homes(["a", "b", "a", "c", "d", "e"], 2) == {"a": 0, "b": 1, "c": 0, "d": 1, "e": 0}
    assert tenant_homes(["a", "b"], 3) == {"a": 0, "b": 1}


def test_simulate_per_worker_splits_memory_and_keeps_tenants_whole():
    # two tenants' sessions that each fit a 4-block cache, and together do not fit 4 blocks
    records = [TraceRecord(float(i), 64, 1, tenant=f"t{i % 2}", session=f"s{i % 2}",
                           hash_ids=list(range(i % 2 * 10, i % 2 * 10 + 4))) for i in range(8)]
    one = simulate(records, 16, 4)
    assert "per_worker" not in one
    assert one["lru"]["block_hit_rate"] == 0.0  # the two sessions evict each other
    split = simulate(records, 16, 8, num_workers=2)
    per_worker = split["per_worker"]
    assert set(per_worker) == {"lru", "predictive", "ttl", "kvflow", "belady"}
    assert per_worker["lru"]["block_hit_rate"] == 0.75  # every request but its session's first hits
    assert per_worker["belady"]["block_hit_rate"] >= per_worker["lru"]["block_hit_rate"]


def test_sweep_points_sort_tenant_counts_as_numbers_and_drop_missing_points():
    assert sweep_points({"10": 1.5, "9": 2.0, "3": None, 4: 0.5}) == [(4, 0.5), (9, 2.0), (10, 1.5)]


def test_plot_of_a_saved_run_writes_both_figures(tmp_path):
    saved = {"model": "tiny", "requests": 3,
             "policies": {"lru": {"total": {"ttft_p50_s": 0.1, "ttft_mean_s": 0.2, "ttft_p99_s": 0.4}}},
             "capacity": {"slo_p99_ttft_s": 2.0, "p99_ttft_by_tenants": {"lru": {"9": 1.0, "10": 3.0}}}}
    plot(saved, tmp_path, "run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run_capacity.png", "run_ttft.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in tmp_path.iterdir())
