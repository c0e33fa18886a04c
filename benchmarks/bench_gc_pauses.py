"""Garbage-collection pauses under load: the gateway with its start-up heap frozen (the
default) against CPython's defaults (`[server] freeze_startup_heap = false`).

    python benchmarks/bench_gc_pauses.py [--rounds 6] [--requests 1600] [--concurrency 16]

One run starts a fake OpenAI-compatible upstream (fixed latency) and two gateways in front
of it, identical but for the setting, both tracing (the default) into a temporary store.
Each round sends the same closed-loop load to the upstream directly and then through each
gateway (which goes first alternates), over the passthrough path, and reads each
gateway's `/metrics` (`stepahead_gc_*`, admin key) before and after its load. Overhead =
gateway latency quantile - direct latency quantile in that round. Prints one JSON line:
per gateway the rounds, the median p50 / p99 overhead, the worst p99, and the full
(generation 2) collections during the loads with the time they paused the gateway, the
longest one since the gateway was ready, and the objects frozen; and the ratios
default-settings / frozen.
"""
from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import non_negative_float, positive_int  # noqa: E402
from benchmarks.bench_gateway_overhead import run_load  # noqa: E402
from benchmarks.bench_servers import (API_KEY, bench_tenant_toml, fake_model_toml, free_port,  # noqa: E402
                                      server_env, spawn, spawn_fake_upstream, stop_all, wait_ready)

SETTINGS = {"frozen": True, "defaults": False}   # gateway name -> freeze_startup_heap


def gateway_config(path: Path, upstream_url: str, freeze: bool, store: Path) -> None:
    path.write_text(f"""
[server]
freeze_startup_heap = {str(freeze).lower()}
responses_db = ":memory:"

[tracing]
store_path = "{store}"
""" + fake_model_toml("fake", upstream_url, True) + bench_tenant_toml(admin=True))


def full_collections(base_url: str) -> dict[str, float]:
    """The gateway's `stepahead_gc_*` figures of generation 2 so far, and its frozen objects."""
    text = httpx.get(f"{base_url}/metrics", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10).text
    values = {}
    for line in text.splitlines():
        if line.startswith("stepahead_gc_") and ('generation="2"' in line or "{" not in line):
            values[line.split("{", 1)[0].split(" ", 1)[0].removeprefix("stepahead_gc_")] = float(line.rsplit(" ", 1)[1])
    return values


def ratio(numerator: float, denominator: float) -> float | None:
    return round(numerator / denominator, 2) if denominator > 0 else None


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rounds", type=positive_int, default=6,
                        help="rounds, each gateway once per round (order alternating)")
    parser.add_argument("--requests", type=positive_int, default=1600, help="per gateway and round")
    parser.add_argument("--concurrency", type=positive_int, default=16, help="requests in flight at once")
    parser.add_argument("--latency-ms", type=non_negative_float, default=20.0,
                        help="milliseconds the fake upstream waits before each reply")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-gc-"))
    env = server_env(workdir)
    processes: list[subprocess.Popen] = []
    began_s = time.monotonic()
    try:
        fake_port = free_port()
        upstream = f"http://127.0.0.1:{fake_port}"
        processes.append(spawn_fake_upstream(fake_port, args.latency_ms, env, workdir))
        urls = {}
        for name, freeze in SETTINGS.items():
            port = free_port()
            gateway_config(workdir / f"{name}.toml", upstream, freeze, workdir / f"{name}-traces.sqlite3")
            processes.append(spawn([sys.executable, "-m", "gateway.cli", "serve", "--config",
                                    str(workdir / f"{name}.toml"), "--port", str(port), "--log-level", "error"],
                                   env, workdir / f"{name}.log"))
            urls[name] = f"http://127.0.0.1:{port}"
        wait_ready(f"{upstream}/health", processes[0])
        for process, url in zip(processes[1:], urls.values()):
            wait_ready(f"{url}/health", process)

        rounds: dict[str, list[dict]] = {name: [] for name in SETTINGS}
        for number in range(args.rounds):
            load = dict(concurrency=args.concurrency, num_requests=args.requests,
                        num_warmup=max(32, args.concurrency * 4))
            direct = asyncio.run(run_load(f"{upstream}/v1/chat/completions", "fake", **load))
            order = list(SETTINGS) if number % 2 == 0 else list(reversed(SETTINGS))
            for name in order:
                before = full_collections(urls[name])
                result = asyncio.run(run_load(f"{urls[name]}/v1/chat/completions", "fake", **load))
                after = full_collections(urls[name])
                rounds[name].append({
                    "overhead_p50_ms": round(result["p50_ms"] - direct["p50_ms"], 3),
                    "overhead_p99_ms": round(result["p99_ms"] - direct["p99_ms"], 3),
                    "full_collections": int(after["collections_total"] - before["collections_total"]),
                    "full_collection_pause_ms": round(
                        (after["pause_seconds_total"] - before["pause_seconds_total"]) * 1e3, 1)})
        summary = {}
        for name, results in rounds.items():
            final = full_collections(urls[name])
            summary[name] = {
                "freeze_startup_heap": SETTINGS[name], "frozen_objects": int(final["frozen_objects"]),
                "overhead_p50_ms_median": round(statistics.median(r["overhead_p50_ms"] for r in results), 3),
                "overhead_p99_ms_median": round(statistics.median(r["overhead_p99_ms"] for r in results), 3),
                "overhead_p99_ms_worst": max(r["overhead_p99_ms"] for r in results),
                "full_collections_in_loads": sum(r["full_collections"] for r in results),
                "full_collection_pause_ms_in_loads": round(sum(r["full_collection_pause_ms"] for r in results), 1),
                "longest_full_collection_ms": round(final["pause_max_seconds"] * 1e3, 1),
                "rounds": results}
        frozen, defaults = summary["frozen"], summary["defaults"]
        ratios = {  # null where the frozen gateway's figure is zero or below
            "defaults_over_frozen_worst_p99": ratio(defaults["overhead_p99_ms_worst"], frozen["overhead_p99_ms_worst"]),
            "defaults_over_frozen_full_collection_pause": ratio(defaults["full_collection_pause_ms_in_loads"],
                                                                frozen["full_collection_pause_ms_in_loads"]),
            "defaults_over_frozen_longest_full_collection": ratio(defaults["longest_full_collection_ms"],
                                                                  frozen["longest_full_collection_ms"])}
        print(json.dumps({"benchmark": "gc_pauses", "concurrency": args.concurrency, "requests": args.requests,
                          "rounds": args.rounds, "latency_ms": args.latency_ms, "cpus": os.cpu_count(),
                          "wall_s": round(time.monotonic() - began_s, 1), "ratios": ratios, **summary}))
    finally:
        stop_all(processes, workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
