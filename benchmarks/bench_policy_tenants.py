"""The policies' own cost as tenants multiply: the simulator's wall time for LRU and
predictive on generated agent workloads of 4, 40 and 400 tenants (about the same number of
requests each), one run.

    python benchmarks/bench_policy_tenants.py [--tenants 4,40,400] [--requests 2000] [--hot-blocks 1000]

Each workload comes from the workload generator (seed 0; sessions per tenant chosen so
each has about --requests requests; sessions start at 2 per second) and is replayed
through the real block manager and policies (`cache.sim.replay`) with --hot-blocks HOT
blocks and reservations as the gateway runs them. Prints one JSON line: per tenant count,
each policy's wall seconds, microseconds per eviction and block hit rate, and
predictive ÷ LRU wall time (what forecasts cost on top of recency).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import positive_int, positive_ints  # noqa: E402
from agents_trace.workload.generator import WorkloadConfig, generate_workload  # noqa: E402
from agents_trace.workload.tool_patterns import load_patterns  # noqa: E402
from cache.sim.replay import SimConfig, replay  # noqa: E402
from cache.sim.requests import to_sim_requests  # noqa: E402

REQUESTS_PER_SESSION = 9   # about what the generator's defaults give


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--tenants", type=positive_ints, default="4,40,400",
                        help="tenant counts, comma-separated: one simulation each")
    parser.add_argument("--requests", type=positive_int, default=2000, help="requests simulated per tenant count")
    parser.add_argument("--hot-blocks", type=positive_int, default=1000,
                        help="HOT tier blocks of the simulated cache")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the requests")
    args = parser.parse_args()
    began = time.monotonic()
    patterns = load_patterns()
    results = []
    for num_tenants in args.tenants:
        sessions = max(1, round(args.requests / REQUESTS_PER_SESSION / num_tenants))
        config = WorkloadConfig(num_tenants=num_tenants, num_sessions=sessions, seed=args.seed,
                                session_rate_per_s=2.0)
        requests = to_sim_requests(generate_workload(config, patterns), config.block_size)[:args.requests]
        row: dict = {"tenants": num_tenants, "requests": len(requests)}
        for policy in ("lru", "predictive"):
            result = replay(requests, SimConfig(num_hot_blocks=args.hot_blocks, policy=policy,
                                                block_size=config.block_size)).to_json()
            row[policy] = {"wall_s": result["wall_s"], "block_hit_rate": result["block_hit_rate"],
                           "us_per_eviction": round(result["wall_s"] / max(1, result["evictions"]) * 1e6, 1)}
        row["predictive_over_lru_wall"] = round(row["predictive"]["wall_s"] / row["lru"]["wall_s"], 2)
        results.append(row)
    print(json.dumps({"benchmark": "policy_tenants", "hot_blocks": args.hot_blocks, "seed": args.seed,
                      "cpus": os.cpu_count(), "wall_s": round(time.monotonic() - began, 1), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
