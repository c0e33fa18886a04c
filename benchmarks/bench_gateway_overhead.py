"""Gateway overhead: stepahead vs LiteLLM's proxy, in front of the same fake upstream.

    python benchmarks/bench_gateway_overhead.py [--latency-ms 20] [--requests 400]

One run starts a fake OpenAI-compatible upstream that answers every chat completion after
a fixed latency, stepahead (`stepahead serve`) and LiteLLM's proxy (`litellm`, from
`litellm[proxy]`) each fronting it, then, for concurrency 1, 16 and 64, sends the same
closed-loop load straight to the upstream (the baseline) and through each gateway.
Overhead = gateway latency quantile − direct latency quantile at the same concurrency.
stepahead runs twice: its default upstream path (`litellm.acompletion`) and its
`passthrough` path for OpenAI-compatible upstreams. Prints one JSON line.

LiteLLM's proxy runs from its own virtual environment (`bash scripts/litellm_proxy_venv.sh`
makes .venvs/litellm-proxy; `--litellm-cli` names another `litellm` command); without it the
benchmark stops and says so, unless `--no-litellm-proxy` asks for stepahead alone.
Each server is its own process (benchmarks/bench_servers.py); the client is an aiohttp closed loop in
this process.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from script_args import benchmark_parser  # noqa: E402
from cache.cli_args import non_negative_float, positive_int, positive_ints  # noqa: E402
from bench_servers import (API_KEY, ROOT, bench_tenant_toml, fake_model_toml, free_port, server_env,  # noqa: E402
                           spawn, spawn_fake_upstream, stop_all, wait_ready)

PROXY_VENV_CLI = ROOT / ".venvs" / "litellm-proxy" / "bin" / "litellm"
def stepahead_config(path: Path, upstream_url: str) -> None:
    path.write_text(fake_model_toml("fake", upstream_url, False)
                    + fake_model_toml("fake-passthrough", upstream_url, True) + bench_tenant_toml())


def litellm_proxy_config(path: Path, upstream_url: str) -> None:
    path.write_text(f"""
model_list:
  - model_name: fake
    litellm_params:
      model: openai/fake
      api_base: {upstream_url}/v1
      api_key: sk-upstream
litellm_settings:
  drop_params: true
  set_verbose: false
  json_logs: false
general_settings:
  master_key: {API_KEY}
""")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_load(url: str, model: str, concurrency: int, num_requests: int,
                   num_warmup: int) -> dict:
    import aiohttp
    body = json.dumps({"model": model, "max_tokens": 16,
                       "messages": [{"role": "user", "content": "hello " * 40}]}).encode()
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
    latencies_s: list[float] = []
    overheads_ms: list[float] = []
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def one(record: bool) -> None:
            started_s = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"{url}: HTTP {response.status}")
                if record:
                    latencies_s.append(time.perf_counter() - started_s)
                    header = response.headers.get("x-stepahead-overhead-ms")
                    if header is not None:
                        overheads_ms.append(float(header))

        async def worker(count: int, record: bool) -> None:
            for _ in range(count):
                await one(record)

        await asyncio.gather(*(worker(max(1, num_warmup // concurrency), False)
                               for _ in range(concurrency)))
        started_s = time.perf_counter()
        per_worker = max(1, num_requests // concurrency)
        await asyncio.gather(*(worker(per_worker, True) for _ in range(concurrency)))
        elapsed_s = time.perf_counter() - started_s
    result = {"p50_ms": quantile(latencies_s, 0.5) * 1e3, "p99_ms": quantile(latencies_s, 0.99) * 1e3,
              "requests_per_s": len(latencies_s) / elapsed_s, "num_requests": len(latencies_s)}
    if overheads_ms:
        result["self_reported_overhead_p50_ms"] = quantile(overheads_ms, 0.5)
        result["self_reported_overhead_p99_ms"] = quantile(overheads_ms, 0.99)
    return result


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--latency-ms", type=non_negative_float, default=20.0,
                        help="milliseconds the fake upstream waits before each reply")
    parser.add_argument("--requests", type=positive_int, default=640, help="requests sent per target and level")
    parser.add_argument("--concurrency", type=positive_ints, default="1,16,64",
                        help="requests in flight at once: one level each, comma-separated")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the run (Python's random module)")
    parser.add_argument("--no-litellm-proxy", action="store_true", help="measure stepahead alone")
    parser.add_argument("--litellm-cli", help="LiteLLM's proxy command (default: the one "
                        "scripts/litellm_proxy_venv.sh installs, else `litellm` on PATH)")
    args = parser.parse_args()
    random.seed(args.seed)

    litellm_cli = None
    if not args.no_litellm_proxy:
        litellm_cli = args.litellm_cli or (str(PROXY_VENV_CLI) if PROXY_VENV_CLI.exists() else shutil.which("litellm"))
        if litellm_cli is None or shutil.which(litellm_cli) is None:
            print("bench_gateway_overhead: LiteLLM's proxy (the anchor) is not installed: "
                  "`bash scripts/litellm_proxy_venv.sh` installs it, `--no-litellm-proxy` measures "
                  "stepahead alone", file=sys.stderr)
            return 2
    workdir = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    env = server_env(workdir)
    processes: list[subprocess.Popen] = []
    try:
        fake_port, gateway_port, proxy_port = free_port(), free_port(), free_port()
        upstream = f"http://127.0.0.1:{fake_port}"
        processes.append(spawn_fake_upstream(fake_port, args.latency_ms, env, workdir))
        stepahead_config(workdir / "stepahead.toml", upstream)
        processes.append(spawn([sys.executable, "-m", "gateway.cli", "serve", "--config",
                                str(workdir / "stepahead.toml"), "--port", str(gateway_port),
                                "--log-level", "error"], env, workdir / "stepahead.log"))
        targets = {"direct": (f"{upstream}/v1/chat/completions", "fake"),
                   "stepahead": (f"http://127.0.0.1:{gateway_port}/v1/chat/completions", "fake"),
                   "stepahead_passthrough": (
                       f"http://127.0.0.1:{gateway_port}/v1/chat/completions",
                       "fake-passthrough")}
        if litellm_cli is not None:
            litellm_proxy_config(workdir / "proxy.yaml", upstream)
            processes.append(spawn([litellm_cli, "--config", str(workdir / "proxy.yaml"),
                                    "--host", "127.0.0.1", "--port", str(proxy_port),
                                    "--num_workers", "1"], env, workdir / "proxy.log"))
            targets["litellm_proxy"] = (f"http://127.0.0.1:{proxy_port}/v1/chat/completions",
                                        "fake")
        wait_ready(f"{upstream}/health", processes[0])
        wait_ready(f"http://127.0.0.1:{gateway_port}/health", processes[1])
        if "litellm_proxy" in targets:
            wait_ready(f"http://127.0.0.1:{proxy_port}/health/liveliness", processes[2], 300, workdir / "proxy.log",
                       "LiteLLM's proxy did not start: `bash scripts/litellm_proxy_venv.sh` installs it with "
                       "its extras in a virtual environment of its own")

        levels = {}
        for concurrency in args.concurrency:
            num_requests = args.requests if concurrency > 1 else max(100, args.requests // 4)
            level = {name: asyncio.run(run_load(url, model, concurrency, num_requests,
                                                num_warmup=max(32, concurrency * 4)))
                     for name, (url, model) in targets.items()}
            direct = level["direct"]
            for name, result in level.items():
                if name != "direct":
                    result["overhead_p50_ms"] = result["p50_ms"] - direct["p50_ms"]
                    result["overhead_p99_ms"] = result["p99_ms"] - direct["p99_ms"]
            levels[str(concurrency)] = {name: {k: round(v, 3) for k, v in result.items()}
                                        for name, result in level.items()}
        summary = {}
        for name in targets:
            if name == "direct":
                continue
            summary[name] = {c: {"overhead_p50_ms": levels[c][name]["overhead_p50_ms"],
                                 "overhead_p99_ms": levels[c][name]["overhead_p99_ms"],
                                 "requests_per_s": levels[c][name]["requests_per_s"]}
                             for c in levels}
        if "litellm_proxy" in targets:
            for name in ("stepahead", "stepahead_passthrough"):
                summary[f"litellm_proxy_over_{name}_overhead_p50"] = {
                    c: round(levels[c]["litellm_proxy"]["overhead_p50_ms"]
                             / max(levels[c][name]["overhead_p50_ms"], 1e-3), 2)
                    for c in levels}
                summary[f"{name}_below_litellm_proxy_at_every_level"] = all(
                    levels[c][name]["overhead_p50_ms"] < levels[c]["litellm_proxy"]["overhead_p50_ms"]
                    and levels[c][name]["overhead_p99_ms"] < levels[c]["litellm_proxy"]["overhead_p99_ms"]
                    for c in levels)
        if "16" in levels:
            for name in ("stepahead", "stepahead_passthrough"):
                summary[f"{name}_meets_c16_target"] = (
                    levels["16"][name]["overhead_p50_ms"] < 1.0
                    and levels["16"][name]["overhead_p99_ms"] < 5.0)
        print(json.dumps({"benchmark": "gateway_overhead", "latency_ms": args.latency_ms,
                          "seed": args.seed, "cpus": os.cpu_count(), "summary": summary,
                          "levels": levels}))
    finally:
        stop_all(processes, workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
