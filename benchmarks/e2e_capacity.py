"""The capacity figure of the end-to-end benchmark, its simulator cross-check, and plots.

Capacity: for a growing number of tenants, each bringing the same load (sessions per
tenant and session rate per tenant held fixed, so n tenants send n times the sessions
per second), replay the workload through the gateway with predictive and with LRU, and
report the largest tenant count whose p99 TTFT stays under the SLO. A policy that
misses the SLO at n is not run at larger n (recorded as None): its p99 only grows with
load. The caller passes `run(policy, records, header) -> report` (bench_e2e.run_policy).

Simulator: the same trace through `cache.sim` (LRU, predictive with its built-in gap
forecaster, Belady) at the gateway's total KV memory, to show how much headroom a
forecast has on this workload independent of timing noise.

A library of bench_e2e.py, not a script: run as one, it says so (exit status 2).
"""
from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

if __name__ == "__main__":   # before the imports below, which need the repository on sys.path
    print("error: e2e_capacity.py is a library of bench_e2e.py, not a script: run "
          "python benchmarks/bench_e2e.py --help", file=sys.stderr)
    sys.exit(2)

from benchmarks.e2e_runs import policy_orders  # noqa: E402
from cache.trace_format import TraceHeader  # noqa: E402

CAPACITY_POLICIES = ("predictive", "lru")


def sweep_counts(max_tenants: int, step: int, start: int = 0) -> list[int]:
    """start (default: step), start + step, ..., up to max_tenants (always included)."""
    step = max(1, step)
    counts = list(range(start or step, max_tenants + 1, step))
    if not counts or counts[-1] != max_tenants:
        counts.append(max_tenants)
    return counts


def capacity_sweep(counts: list[int], slo_s: float, make_workload: Callable,
                   run: Callable[[str, list, TraceHeader], dict], repeats: int = 1) -> dict:
    """Largest tenant count whose p99 TTFT stays under `slo_s`, per policy.

    make_workload(n) -> (WorkloadConfig, records) for n tenants. With `repeats` > 1 each
    point is replayed that many times per policy, the order alternating, and a policy's
    p99 at the point is the median of its runs (all kept under "p99_runs_by_tenants")."""
    rows: dict[str, dict[int, float | None]] = {p: {} for p in CAPACITY_POLICIES}
    runs: dict[str, dict[int, list]] = {p: {} for p in CAPACITY_POLICIES}
    missed: set[str] = set()
    for num_tenants in counts:
        config, records = make_workload(num_tenants)
        header = TraceHeader(block_size=config.block_size)
        live = [p for p in CAPACITY_POLICIES if p not in missed]
        for policy in missed:
            rows[policy][num_tenants] = None
        for order in policy_orders(live, repeats):
            for policy in order:
                report = run(policy, records, header)
                runs[policy].setdefault(num_tenants, []).append(report["total"]["ttft_p99_s"])
                print(json.dumps({"capacity": policy, "tenants": num_tenants, "requests": len(records),
                                  "ttft_p99_s": report["total"]["ttft_p99_s"],
                                  "ttft_mean_s": report["total"]["ttft_mean_s"],
                                  "cached_token_share": report["total"]["cached_token_share"]}),
                      file=sys.stderr, flush=True)
        for policy in live:
            values = runs[policy][num_tenants]
            p99 = None if any(v is None for v in values) else statistics.median(values)
            rows[policy][num_tenants] = p99
            if p99 is None or p99 > slo_s:
                missed.add(policy)
        if len(missed) == len(CAPACITY_POLICIES):
            break
    best = {p: max([n for n, v in r.items() if v is not None and v <= slo_s], default=0)
            for p, r in rows.items()}
    ratio = round(best["predictive"] / best["lru"], 3) if best["lru"] else None
    return {"slo_p99_ttft_s": slo_s, "repeats_per_point": max(1, repeats),
            "p99_ttft_by_tenants": rows, "p99_runs_by_tenants": runs, "max_tenants": best,
            "predictive_over_lru_tenants": ratio}


def simulate(records, block_size: int, num_hot_blocks: int, num_workers: int = 1) -> dict:
    """Block hit rate and simulated TTFT per policy for the trace in `cache.sim`: one cache
    of `num_hot_blocks`, and (`num_workers` > 1, under "per_worker") the gateway's layout —
    one cache of num_hot_blocks / num_workers per worker, each tenant on its home worker
    (`tenant_homes`, as the gateway's router places new sessions; the router also spills
    sessions of a busy tenant to another worker, which this split does not model), hit
    rates and TTFTs weighted over the workers."""
    from cache.sim.requests import to_sim_requests

    requests = to_sim_requests(records, block_size)
    out = _simulate_parts([requests], block_size, num_hot_blocks)
    if num_workers > 1:
        homes = tenant_homes([r.tenant for r in requests], num_workers)
        parts = [[r for r in requests if homes[r.tenant] == w] for w in range(num_workers)]
        out["per_worker"] = _simulate_parts([p for p in parts if p], block_size, num_hot_blocks // num_workers)
    return out


def tenant_homes(tenants: list[str], num_workers: int) -> dict[str, int]:
    """Each tenant, in order of first appearance, on the worker with the fewest tenants so
    far (the lower index on ties) — shards.router's rule for tenant homes."""
    homes: dict[str, int] = {}
    counts = [0] * num_workers
    for tenant in tenants:
        if tenant not in homes:
            worker = min(range(num_workers), key=lambda w: (counts[w], w))
            homes[tenant] = worker
            counts[worker] += 1
    return homes


def _simulate_parts(parts, block_size: int, num_hot_blocks: int) -> dict:
    from cache.sim.cost_model import CostModel
    from cache.sim.replay import SimConfig, replay

    out = {}
    for policy in ("lru", "predictive", "ttl", "kvflow", "belady"):
        config = SimConfig(num_hot_blocks=num_hot_blocks, policy=policy, block_size=block_size,
                           cost=CostModel.for_block_size(block_size))
        results = [(replay(part, config).to_json(), part) for part in parts]
        num_blocks = sum(r.num_blocks for _, part in results for r in part)
        num_requests = sum(len(part) for _, part in results)
        out[policy] = {
            "block_hit_rate": round(sum(res["block_hit_rate"] * sum(r.num_blocks for r in part)
                                        for res, part in results) / max(num_blocks, 1), 6),
            "sim_ttft_mean_s": round(sum(res["sim_ttft_mean_s"] * len(part) for res, part in results)
                                     / max(num_requests, 1), 6),
            "sim_ttft_p99_s": max(res["sim_ttft_p99_s"] for res, _ in results)}
    return out


def sweep_points(p99_by_tenants: dict) -> list[tuple[int, float]]:
    """(tenants, p99 TTFT) of one policy's sweep, by tenant count, measured points only
    (a saved run's JSON has the counts as strings: "10" sorts after "9" here)."""
    return sorted((int(n), p99) for n, p99 in p99_by_tenants.items() if p99 is not None)


def plot_paths(out_dir: Path, name: str = "e2e") -> tuple[Path, Path]:
    """The TTFT and capacity images `plot` draws into `out_dir`."""
    return out_dir / f"{name}_ttft.png", out_dir / f"{name}_capacity.png"


def plot(out: dict, out_dir: Path, name: str = "e2e") -> None:
    """Draw `out` (bench_e2e's JSON) as {out_dir}/{name}_ttft.png (when it has policy runs)
    and {out_dir}/{name}_capacity.png (when it has a capacity sweep); KeyError or TypeError
    when `out` is not bench_e2e's JSON."""
    ttft_path, capacity_path = plot_paths(out_dir, name)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(out["policies"])
    if policies:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for i, key in enumerate(("ttft_p50_s", "ttft_mean_s", "ttft_p99_s")):
            ax.bar([x + i * 0.27 for x in range(len(policies))],
                   [out["policies"][p]["total"][key] or 0 for p in policies], width=0.27, label=key)
        ax.set_xticks([x + 0.27 for x in range(len(policies))], policies)
        ax.set_ylabel("seconds")
        runs = len(out.get("runs") or [None])
        medians = f", medians of {runs} runs" if runs > 1 else ""
        ax.set_title(f"TTFT through the gateway ({out['model']}, {out['requests']} requests{medians})")
        ax.legend()
        fig.tight_layout()
        fig.savefig(ttft_path, dpi=120)
        plt.close(fig)
    if "capacity" in out:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for policy, rows in out["capacity"]["p99_ttft_by_tenants"].items():
            points = sweep_points(rows)
            ax.plot([n for n, _ in points], [p99 for _, p99 in points], marker="o", label=policy)
        ax.axhline(out["capacity"]["slo_p99_ttft_s"], color="grey", linestyle="--", label="SLO")
        ax.set_xlabel("tenants")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_ylabel("p99 TTFT (s)")
        ax.set_title(f"Capacity through the gateway ({out['model']}, p99 TTFT SLO "
                     f"{out['capacity']['slo_p99_ttft_s']:g} s)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(capacity_path, dpi=120)
        plt.close(fig)
