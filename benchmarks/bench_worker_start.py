"""Worker processes' start: forked from the preloaded fork server (the CPU default) against
spawned (`transport_options = { start_method = "spawn" }`), in one run.

Per start method:
- gateway: a fresh `stepahead serve` from launch until `/health` answers 200 (every
  worker ready), then from SIGINT until the gateway has exited; and the proportional set
  size of its processes once ready (the fork server's pages shared by its workers count
  once, split among them), and of the gateway's own process alone;
- restart: in one engine (what a gateway runs), a worker killed with SIGKILL until its
  next incarnation is ready — what requests wait for after a worker crash — --restarts
  times.
Methods alternate over --repeats (forward, then backward); figures are medians; the ratios
are spawn / forkserver (above 1: forking is faster).

    python benchmarks/bench_worker_start.py                    # SmolLM2, 2 workers
    python benchmarks/bench_worker_start.py --model tiny --repeats 2 --restarts 3
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import positive_int  # noqa: E402
from benchmarks.bench_servers import bench_tenant_toml, free_port, server_env, spawn, wait_ready  # noqa: E402

METHODS = ("forkserver", "spawn")


def gateway_config(path: Path, model: str, num_workers: int, method: str) -> None:
    path.write_text(f"""
[[models]]
name = "m"
kind = "local"
path = {json.dumps(model)}
num_workers = {num_workers}
[models.engine]
transport_options = {{ start_method = "{method}" }}
""" + bench_tenant_toml(admin=True))


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (Linux /proc; threads are not processes)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            children = (task / "children").read_text().split() if (task / "children").exists() else []
            todo.extend(int(child) for child in children)
    return found


def tree_pss_mib(pid: int, tree: bool = True) -> float | None:
    """Proportional set size of `pid`'s process tree (shared pages split among their
    users), or of `pid` alone, in MiB; None where /proc does not tell."""
    total_kib = 0
    try:
        for member in process_tree(pid) if tree else [pid]:
            rollup = Path(f"/proc/{member}/smaps_rollup").read_text()
            total_kib += next(int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:"))
    except (OSError, StopIteration):
        return None
    return round(total_kib / 1024, 1)


def time_gateway(workdir: Path, model: str, num_workers: int, method: str, attempt: int) -> dict:
    """One gateway's start (launch -> /health 200) and stop (SIGINT -> exited), in seconds,
    and the memory its processes hold once ready."""
    config, port = workdir / f"{method}-{attempt}.toml", free_port()
    gateway_config(config, model, num_workers, method)
    log = workdir / f"{method}-{attempt}.log"
    began = time.monotonic()
    process = spawn([sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--port", str(port),
                     "--log-level", "warning"], server_env(workdir), log)
    try:
        wait_ready(f"http://127.0.0.1:{port}/health", process, timeout_s=600, log_path=log)
        ready = time.monotonic()
        import httpx

        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).json()
        assert health.get("status") == "ok", health
        pss_mib, main_pss_mib = tree_pss_mib(process.pid), tree_pss_mib(process.pid, tree=False)
        stopping = time.monotonic()
        process.send_signal(signal.SIGINT)
        process.wait(120)
        return {"start_s": round(ready - began, 3), "stop_s": round(time.monotonic() - stopping, 3),
                "pss_mib": pss_mib, "main_pss_mib": main_pss_mib}
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def time_restarts(model: str, num_workers: int, method: str, restarts: int) -> list[float]:
    """Seconds from SIGKILL of w0 until its next incarnation is ready, `restarts` times."""
    from shards.engine import LocalEngine

    engine = LocalEngine(model, num_workers=num_workers, transport_options={"start_method": method})
    await engine.start()
    waits = []
    try:
        for _ in range(restarts):
            incarnation = engine.health()["workers"]["w0"]["incarnation"]
            killed = time.monotonic()
            os.kill(engine.worker_pid("w0"), signal.SIGKILL)
            while True:
                w0 = engine.health()["workers"]["w0"]
                if w0["incarnation"] > incarnation and w0["ready"]:
                    break
                if time.monotonic() - killed > 600:
                    raise RuntimeError(f"w0 ({method}) was not ready again within 600 s")
                await asyncio.sleep(0.01)
            waits.append(round(time.monotonic() - killed, 3))
    finally:
        await engine.stop()
    return waits


def ratio(numerator: float, denominator: float) -> float | None:
    return round(numerator / denominator, 2) if denominator > 0 else None


def _median_or_none(values: list) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def summarize(gateways: dict[str, list[dict]], restarts: dict[str, list[float]]) -> dict:
    """Per method the medians and every figure, and spawn / forkserver of each median."""
    summary = {method: {"gateway_start_s_median": statistics.median(g["start_s"] for g in gateways[method]),
                        "gateway_stop_s_median": statistics.median(g["stop_s"] for g in gateways[method]),
                        "gateway_pss_mib_median": _median_or_none([g["pss_mib"] for g in gateways[method]]),
                        "gateway_main_pss_mib_median": _median_or_none([g["main_pss_mib"] for g in gateways[method]]),
                        "worker_restart_s_median": statistics.median(restarts[method]),
                        "gateways": gateways[method], "worker_restarts_s": restarts[method]}
               for method in METHODS}
    forked, spawned = summary["forkserver"], summary["spawn"]
    return {"ratios": {f"spawn_over_forkserver_{key}": ratio(spawned[f"{key}_median"], forked[f"{key}_median"])
                       for key in ("gateway_start_s", "gateway_stop_s", "worker_restart_s")},
            **summary}


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="smollm2", help="tiny, smollm2, or a model directory")
    parser.add_argument("--workers", type=positive_int, default=2, help="worker processes of each gateway")
    parser.add_argument("--repeats", type=positive_int, default=4, help="gateway starts per method")
    parser.add_argument("--restarts", type=positive_int, default=5, help="worker kills per method")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-worker-start-"))
    began = time.monotonic()
    gateways: dict[str, list[dict]] = {method: [] for method in METHODS}
    try:
        for attempt in range(args.repeats):
            for method in (METHODS if attempt % 2 == 0 else METHODS[::-1]):
                gateways[method].append(time_gateway(workdir, args.model, args.workers, method, attempt))
                print(json.dumps({"progress": "gateway", "method": method, **gateways[method][-1]}),
                      file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    restarts = {method: asyncio.run(time_restarts(args.model, args.workers, method, args.restarts))
                for method in METHODS}
    print(json.dumps({
        "benchmark": "worker_start", "model": args.model, "workers": args.workers, "repeats": args.repeats,
        "restarts": args.restarts, "cpus": os.cpu_count(), "wall_s": round(time.monotonic() - began, 1),
        **summarize(gateways, restarts)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
