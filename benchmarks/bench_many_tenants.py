"""Per-request bookkeeping with many tenants, each part against what it did before
(reproduced here as the baseline).

The parts:

- API key → tenant (every request): comparing the presented key's digest with every
  stored digest, against one dict lookup by digest (`gateway.auth.KeyRing` now);
- a fair queue's admission pass (before every decode step while anything waits, in each
  worker; and in the engine's dispatcher): scanning a FIFO for every tenant ever served,
  against keeping FIFOs only for tenants with something queued (`shards.fair_queue` now);
- the dispatcher's `can_take` (for each worker, before each send): summing a count per
  worker for every tenant ever served, zeros included, against counts only for tenants
  with requests out (`shards.dispatcher` now; the baseline is the same dispatcher with
  the zeros it used to keep put back);
- and, once per start, loading a config file with that many tenants (`load_config`;
  no baseline: the figure to expect).

With `--gateway N`, also the whole gateway: two `stepahead serve` processes in front of
one fake upstream (`bench_gateway_overhead`'s, 20 ms), one with the benchmark's tenant
alone and one with N more, each given the same closed-loop passthrough load (16
concurrent, --gateway-requests requests after a warm-up, the order alternating over 3
rounds); per gateway the median over rounds of p50 / p99 latency and of its CPU time per
request (from /proc).

    python benchmarks/bench_many_tenants.py [--tenants 10,1000,10000] [--lookups 2000]

For each tenant count (one key each; each tenant served once, then 4 waiting): the
median over 5 rounds of microseconds per lookup (half known keys, half unknown), per
admission pass (`tenants` and `pop_first` as `WorkerLoop.admit_ready` calls them)
and per `can_take`, each way. Prints one JSON line.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import non_negative_int, positive_int, positive_ints  # noqa: E402
from gateway.auth import KeyRing  # noqa: E402
from shards.dispatcher import DispatchConfig, Dispatcher  # noqa: E402
from shards.fair_queue import FairQueue  # noqa: E402
from shards.protocol import FinishEvent, SamplingParams, WorkItem  # noqa: E402
from shards.route_records import RouterConfig  # noqa: E402
from shards.router import Router  # noqa: E402
from gateway.config import TenantConfig, key_digest, load_config  # noqa: E402


def compare_every_digest(entries: tuple[tuple[bytes, str], ...], api_key: str) -> str | None:
    """The former lookup: constant time in which digest matched, linear in the tenants."""
    presented = hashlib.sha256(api_key.encode()).digest()
    found = None
    for digest, tenant in entries:
        if hmac.compare_digest(presented, digest):
            found = tenant
    return found


class KeepsEmptyFifos(FairQueue):
    """The former bookkeeping: a tenant's emptied FIFO stayed, and every pass skipped it."""

    def _take(self, entry) -> None:
        self._queues[entry.tenant].popleft()
        del self._by_key[entry.key]
        self._virtual_time = max(self._virtual_time, entry.start_tag)

    def tenants(self) -> list[str]:
        return [t for t, q in self._queues.items() if q]

    def heads(self) -> dict:
        return {t: q[0].item for t, q in self._queues.items() if q}

    def _heads(self) -> list:
        heads = [q[0] for q in self._queues.values() if q]
        heads.sort(key=lambda e: (e.start_tag, e.finish_tag, e.seq))
        return heads


def admission_pass_us(queue_class, num_tenants: int, num_passes: int) -> float:
    """Microseconds per admission pass over a queue that served each tenant once and
    now holds 4 requests (none of which the pass may admit, as when slots are full)."""
    queue = queue_class()
    for i in range(num_tenants):
        queue.push(f"tenant-{i}", f"k{i}", i, 10.0)
        queue.pop()
    for j in range(4):
        queue.push(f"tenant-{j}", f"w{j}", j, 10.0)
    began = time.perf_counter()
    for _ in range(num_passes):
        waiting = set(queue.tenants())
        queue.pop_first(lambda tenant, item: tenant in waiting and item is None)
    return (time.perf_counter() - began) / num_passes * 1e6


def can_take_us(num_tenants: int, keep_zeros: bool, num_calls: int) -> float:
    """Microseconds per `Dispatcher.can_take` after each tenant had one request served
    and 4 have one out now (`keep_zeros`: with the zero counts it used to keep)."""
    dispatcher = Dispatcher(Router(RouterConfig(block_size=16)), DispatchConfig())
    dispatcher.add_worker("w0", None, 0.0)
    for i in range(num_tenants):
        item = WorkItem(f"r{i}", f"tenant-{i}", [1] * 32, SamplingParams(max_tokens=4))
        dispatcher.submit(item, [], float(i))
        dispatcher.on_worker_message("w0", FinishEvent(f"r{i}", "length", 32, 0, 4, 0.01, "w0"), i + 0.5)
    for j in range(4):
        dispatcher.submit(WorkItem(f"live{j}", f"tenant-{j}", [1] * 32, SamplingParams(max_tokens=4)), [], 1e6)
    if keep_zeros:
        counts = dispatcher._outstanding["w0"]
        for i in range(num_tenants):
            counts.setdefault(f"tenant-{i}", 0)
    began = time.perf_counter()
    for k in range(num_calls):
        dispatcher.can_take("w0", f"tenant-{k % 8}")
    return (time.perf_counter() - began) / num_calls * 1e6


def config_load_s(num_tenants: int) -> float:
    """Seconds `load_config` takes for a file of one upstream model and `num_tenants` tenants."""
    tenants = "".join(f'[[tenants]]\nname = "tenant-{i}"\napi_key_sha256 = ["{key_digest(f"key-{i}")}"]\n'
                      for i in range(num_tenants))
    with tempfile.TemporaryDirectory(prefix="bench-many-tenants-") as root:
        path = Path(root) / "stepahead.toml"
        path.write_text('[[models]]\nname = "m"\nkind = "upstream"\nlitellm_model = "openai/x"\n' + tenants)
        began = time.perf_counter()
        load_config(path)
        return time.perf_counter() - began


def gateway_cost(extra_tenants: int, num_requests: int, num_rounds: int = 3) -> dict:
    """p50 / p99 ms and CPU µs per request of a gateway with 1 tenant and one with
    1 + `extra_tenants`, under the same passthrough load (medians over rounds)."""
    import asyncio

    import bench_gateway_overhead as overhead
    import bench_servers as servers

    workdir = Path(tempfile.mkdtemp(prefix="bench-many-tenants-gw-"))
    env = servers.server_env(workdir)
    processes = []
    try:
        upstream_port = servers.free_port()
        upstream = f"http://127.0.0.1:{upstream_port}"
        processes.append(servers.spawn_fake_upstream(upstream_port, 20.0, env, workdir))
        servers.wait_ready(f"{upstream}/health", processes[0])
        urls = {}
        for name, count in (("one_tenant", 0), (f"{1 + extra_tenants}_tenants", extra_tenants)):
            extra = "".join(f'[[tenants]]\nname = "tenant-{i}"\napi_key_sha256 = ["{key_digest(f"key-{i}")}"]\n'
                            for i in range(count))
            (workdir / f"{name}.toml").write_text(servers.fake_model_toml("fake-passthrough", upstream, True)
                                                  + servers.bench_tenant_toml() + extra)
            port = servers.free_port()
            process = servers.spawn([sys.executable, "-m", "gateway.cli", "serve", "--config",
                                      str(workdir / f"{name}.toml"), "--port", str(port), "--log-level", "error"],
                                     dict(env, STEPAHEAD_TRACE_DB=str(workdir / f"{name}-traces.sqlite3"),
                                          STEPAHEAD_RESPONSES_DB=str(workdir / f"{name}-responses.sqlite3")),
                                     workdir / f"{name}.log")
            processes.append(process)
            servers.wait_ready(f"http://127.0.0.1:{port}/health", process)
            urls[name] = (f"http://127.0.0.1:{port}/v1/chat/completions", process.pid)
        runs: dict[str, list[dict]] = {name: [] for name in urls}
        for round_index in range(num_rounds):
            for name in (list(urls) if round_index % 2 == 0 else list(reversed(urls))):
                url, pid = urls[name]
                began_cpu = _cpu_s(pid)
                result = asyncio.run(overhead.run_load(url, "fake-passthrough", 16, num_requests, 64))
                result["cpu_us_per_request"] = (_cpu_s(pid) - began_cpu) / result["num_requests"] * 1e6
                runs[name].append(result)
        return {name: {key: round(statistics.median(r[key] for r in results), 2)
                       for key in ("p50_ms", "p99_ms", "cpu_us_per_request")} for name, results in runs.items()}
    finally:
        servers.stop_all(processes, workdir)   # and removes workdir


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (warm-up requests included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def per_lookup_us(lookup, keys: list[str]) -> float:
    began = time.perf_counter()
    for key in keys:
        lookup(key)
    return (time.perf_counter() - began) / len(keys) * 1e6


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--tenants", type=positive_ints, default="10,1000,10000",
                        help="tenant counts, comma-separated: one measurement each")
    parser.add_argument("--lookups", type=positive_int, default=2000,
                        help="key lookups (and queue passes) timed per tenant count")
    parser.add_argument("--gateway", type=non_negative_int, default=0, metavar="N",
                        help="also compare whole gateways with 1 and 1 + N tenants (0: skip that)")
    parser.add_argument("--gateway-requests", type=positive_int, default=2400,
                        help="requests sent to each gateway with --gateway")
    args = parser.parse_args()
    results = []
    for num_tenants in args.tenants:
        keys = [secrets.token_urlsafe(24) for _ in range(num_tenants)]
        tenants = tuple(TenantConfig(f"tenant-{i}", (key_digest(k),)) for i, k in enumerate(keys))
        ring = KeyRing(tenants)
        entries = tuple((bytes.fromhex(d), t.name) for t in tenants for d in t.key_digests)
        presented = [keys[i % num_tenants] if i % 2 == 0 else secrets.token_urlsafe(24) for i in range(args.lookups)]
        assert [ring.tenant_for_key(k) for k in presented] == [compare_every_digest(entries, k) for k in presented]
        every, one = [], []
        for _ in range(5):
            every.append(per_lookup_us(lambda k: compare_every_digest(entries, k), presented))
            one.append(per_lookup_us(ring.tenant_for_key, presented))
        every_us, one_us = statistics.median(every), statistics.median(one)
        kept = statistics.median(admission_pass_us(KeepsEmptyFifos, num_tenants, 500) for _ in range(5))
        dropped = statistics.median(admission_pass_us(FairQueue, num_tenants, 500) for _ in range(5))
        zeros = statistics.median(can_take_us(num_tenants, True, 500) for _ in range(5))
        out_only = statistics.median(can_take_us(num_tenants, False, 500) for _ in range(5))
        results.append({"tenants": num_tenants,
                        "auth": {"every_digest_us": round(every_us, 2), "dict_lookup_us": round(one_us, 2),
                                 "ratio": round(every_us / one_us, 1)},
                        "fair_queue": {"every_tenant_fifo_us": round(kept, 2), "queued_fifos_only_us": round(dropped, 2),
                                       "ratio": round(kept / dropped, 1)},
                        "can_take": {"zeros_kept_us": round(zeros, 2), "tenants_out_only_us": round(out_only, 2),
                                     "ratio": round(zeros / out_only, 1)},
                        "config_load_s": round(config_load_s(num_tenants), 3)})
    report = {"benchmark": "many_tenants", "lookups": args.lookups, "cpus": os.cpu_count(), "results": results}
    if args.gateway:
        report["gateway"] = gateway_cost(args.gateway, args.gateway_requests)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
