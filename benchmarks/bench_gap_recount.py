"""The gap forecaster's P(return) recounts with many tenants, few of them busy: every
tenant's levels redone at each recount (what it did before) against only the tenants
with waits pending or changed since the last one (`GapForecaster._recount` now).

    python benchmarks/bench_gap_recount.py [--tenants 300,3000,10000] [--active 10] [--requests 2560]

For each tenant count: a forecaster that saw 4 sessions of every tenant (tools, then text
answers; the gateway's configuration, a recount every 128 requests), every wait since
resolved; then --requests requests from --active busy tenants, taking turns, fed to two
copies of it, one that redoes every tenant at each recount (all unsettled first) and one
as it runs. Prints one JSON line: microseconds per request (the writer thread's cost of
`observe`, recounts included) and in recounts, each way, and the ratio; also whether both
gave the busy tenants the same forecasts at the end.
"""
from __future__ import annotations

import copy
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import positive_int, positive_ints  # noqa: E402
from cache.forecast_source import RequestSeen  # noqa: E402
from cache.gap_forecaster import GapForecaster, GapForecasterConfig  # noqa: E402

TOOLS = ("search", "read_file", "write_file", "run_tests", "browse")


def built(num_tenants: int, seed: int) -> tuple[GapForecaster, float]:
    """A forecaster that saw 4 sessions of each tenant, all its waits resolved; the time."""
    rng = random.Random(seed)
    events = []
    for i in range(num_tenants):
        for s in range(4):
            t = rng.uniform(0.0, 3600.0)
            for _ in range(rng.randint(2, 5)):
                tools = (rng.choice(TOOLS),) if rng.random() < 0.7 else ()
                events.append((t, f"tenant-{i}", f"s{s}", tools))
                t += rng.lognormvariate(1.5 if tools else 3.0, 0.8)
    forecaster = GapForecaster(GapForecasterConfig(recount_every=10**9))   # built without recounts: faster
    for t, tenant, session, tools in sorted(events):
        forecaster.observe(RequestSeen(tenant, session, t, tool_calls=tools, num_blocks=rng.randint(1, 300)))
    forecaster.config = GapForecasterConfig()
    now_s = max(e[0] for e in events) + 10_000.0
    forecaster.forecast("tenant-0", "s0", now_s)   # every wait given up
    forecaster._recount(now_s)
    return forecaster, now_s


def run(forecaster: GapForecaster, now_s: float, active: list[str], num_requests: int, redo_all: bool,
        seed: int) -> dict:
    rng = random.Random(seed)
    spent = [0.0]
    recount = forecaster._recount
    tenants = list(forecaster.learned_tenants())

    def timed(at_s: float) -> None:
        began = time.perf_counter()
        if redo_all:
            for tenant in tenants:
                forecaster._stats.unsettle(tenant)
        recount(at_s)
        spent[0] += time.perf_counter() - began

    forecaster._recount = timed
    began = time.perf_counter()
    for k in range(num_requests):
        tenant = active[k % len(active)]
        now_s += 0.05
        forecaster.observe(RequestSeen(tenant, f"live{(k // len(active)) % 7}", now_s,
                                       tool_calls=(rng.choice(TOOLS),), num_blocks=50))
    total_s = time.perf_counter() - began
    forecasts = [forecaster.forecast(tenant, f"live{s}", now_s) for tenant in active for s in range(7)]
    return {"us_per_request": round(total_s / num_requests * 1e6, 1),
            "recount_us_per_request": round(spent[0] / num_requests * 1e6, 1), "forecasts": forecasts}


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--tenants", type=positive_ints, default="300,3000,10000",
                        help="tenant counts, comma-separated: one measurement each")
    parser.add_argument("--active", type=positive_int, default=10, help="tenants with requests in flight")
    parser.add_argument("--requests", type=positive_int, default=2560, help="requests timed per tenant count")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the requests")
    args = parser.parse_args()
    began = time.monotonic()
    results = []
    for num_tenants in args.tenants:
        forecaster, now_s = built(num_tenants, args.seed)
        active = [f"tenant-{i}" for i in random.Random(args.seed + 1).sample(range(num_tenants), args.active)]
        every = run(copy.deepcopy(forecaster), now_s, active, args.requests, True, args.seed)
        changed = run(forecaster, now_s, active, args.requests, False, args.seed)
        same = [round(a.p_end, 6) for a in every.pop("forecasts")] == [round(b.p_end, 6) for b in changed.pop("forecasts")]
        results.append({"tenants": num_tenants, "every_tenant": every, "changed_tenants": changed,
                        "same_busy_forecasts": same,
                        "every_over_changed_us_per_request": round(every["us_per_request"] / changed["us_per_request"], 1)})
    print(json.dumps({"benchmark": "gap_recount", "active": args.active, "requests": args.requests,
                      "seed": args.seed, "cpus": os.cpu_count(), "wall_s": round(time.monotonic() - began, 1),
                      "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
