"""The gateway's CPU time per request, compared between source trees (a regression check).

    python benchmarks/bench_gateway_cpu.py --revs b649987,HEAD [--path passthrough|litellm]
        [--requests 3200] [--concurrency 16] [--rounds 3]

Latency overhead on a shared 2-core machine swings by 2x between runs of the same code
(docs/benchmarks.md, "Gateway overhead"), so it cannot tell a change of a few hundred
microseconds per request. The CPU seconds the gateway process spends per request can: the
client, the fake upstream and neighbours delay the gateway but do not add to its own CPU
time. For each round and each tree (order alternating between rounds) this starts the fake
upstream (20 ms) and `stepahead serve` from that tree, in a scratch directory of its own,
warms it with `--warmup` requests (480), then sends `--requests` at `--concurrency`
through the chosen path and reads the gateway's user + system CPU from /proc before and
after.

`--revs` checks each git revision out in a temporary `git worktree` (removed afterwards);
`--trees` names source directories instead. Prints one JSON line: per tree its rounds, the
median CPU µs per request and p50 latency, and `cpu_ratio_last_over_first` (>1: the last
tree spends more CPU per request). Linux only (/proc).
"""
from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from script_args import benchmark_parser  # noqa: E402
from cache.cli_args import non_negative_int, positive_int  # noqa: E402
from bench_gateway_overhead import run_load, stepahead_config  # noqa: E402
from bench_servers import ROOT, free_port, server_env, spawn_fake_upstream, stop_all, wait_ready  # noqa: E402
from cpu_probe import _stat_cpu_s  # noqa: E402

MODELS = {"passthrough": "fake-passthrough", "litellm": "fake"}


@contextmanager
def worktree(rev: str):
    """A detached checkout of `rev` in a temporary directory, removed on exit."""
    parent = Path(tempfile.mkdtemp(prefix="bench-cpu-tree-"))
    path = parent / "tree"
    try:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), rev],
                       check=True, capture_output=True)
        yield path
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
                       capture_output=True)
        shutil.rmtree(parent, ignore_errors=True)


def one_round(tree: Path, model: str, requests: int, concurrency: int, warmup: int = 480) -> dict:
    """Start upstream + gateway from `tree`, warm, load; the gateway's CPU per request."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-cpu-"))
    env = dict(server_env(workdir), PYTHONPATH=str(tree))
    fake_port, gateway_port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{fake_port}"
    processes = [spawn_fake_upstream(fake_port, 20.0, env, workdir)]
    stepahead_config(workdir / "stepahead.toml", upstream)
    processes.append(subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(workdir / "stepahead.toml"),
         "--port", str(gateway_port), "--log-level", "error"],
        env=env, cwd=tree, stdout=open(workdir / "gateway.log", "wb"), stderr=subprocess.STDOUT))
    try:
        wait_ready(f"{upstream}/health", processes[0])
        wait_ready(f"http://127.0.0.1:{gateway_port}/health", processes[1], 180, workdir / "gateway.log")
        url = f"http://127.0.0.1:{gateway_port}/v1/chat/completions"
        asyncio.run(run_load(url, model, concurrency, warmup, num_warmup=concurrency))
        before_s = _stat_cpu_s(f"/proc/{processes[1].pid}/stat")
        load = asyncio.run(run_load(url, model, concurrency, requests, num_warmup=0))
        after_s = _stat_cpu_s(f"/proc/{processes[1].pid}/stat")
        return {"cpu_us_per_request": round((after_s - before_s) / load["num_requests"] * 1e6, 1),
                "p50_ms": round(load["p50_ms"], 2), "p99_ms": round(load["p99_ms"], 2)}
    finally:
        stop_all(processes, workdir)


def main() -> int:
    parser = benchmark_parser(__doc__)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--revs", help="git revisions, comma-separated (e.g. b649987,HEAD)")
    which.add_argument("--trees", help="source directories, comma-separated")
    parser.add_argument("--path", choices=sorted(MODELS), default="passthrough",
                        help="which gateway path the load takes: passthrough (a fake-passthrough model) or litellm")
    parser.add_argument("--requests", type=positive_int, default=3200, help="requests sent per round and tree")
    parser.add_argument("--concurrency", type=positive_int, default=16, help="requests in flight at once")
    parser.add_argument("--rounds", type=positive_int, default=3,
                        help="rounds, each tree once per round (order alternating)")
    parser.add_argument("--warmup", type=non_negative_int, default=480,
                        help="requests that warm each gateway before its load")
    args = parser.parse_args()
    names = (args.revs or args.trees).split(",")
    with ExitStack() as stack:
        trees = ([stack.enter_context(worktree(rev)) for rev in names] if args.revs
                 else [Path(name).resolve() for name in names])
        rounds: dict[str, list[dict]] = {name: [] for name in names}
        for index in range(args.rounds):
            order = list(zip(names, trees))
            for name, tree in (order if index % 2 == 0 else order[::-1]):
                rounds[name].append(one_round(tree, MODELS[args.path], args.requests, args.concurrency,
                                              args.warmup))
                print(f"bench_gateway_cpu: round {index + 1}/{args.rounds} {name}: {rounds[name][-1]}",
                      file=sys.stderr, flush=True)
    result = {name: {"rounds": runs,
                     "cpu_us_per_request_median": statistics.median(r["cpu_us_per_request"] for r in runs),
                     "p50_ms_median": statistics.median(r["p50_ms"] for r in runs)}
              for name, runs in rounds.items()}
    first, last = result[names[0]], result[names[-1]]
    print(json.dumps({"benchmark": "gateway_cpu", "path": args.path, "requests": args.requests,
                      "concurrency": args.concurrency, "trees": result,
                      "cpu_ratio_last_over_first": round(last["cpu_us_per_request_median"]
                                                         / first["cpu_us_per_request_median"], 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
