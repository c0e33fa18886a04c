"""Soak: does a long-running gateway keep its memory and its pace over many agent sessions?

    python benchmarks/bench_soak.py [--model tiny] [--sessions 3000] [--every 500]

One run starts `stepahead serve` twice on a fresh config (two tenants, one local worker,
sessions idle out after `--idle-timeout-s`): with tracing (traces stored, the predictor
learning, forecasts sent to the worker) and without. Each time it drives `--sessions`
short tool-using agent sessions (`--steps` chat completions each, `--concurrency` at a
time, prompts of words from a fixed vocabulary, as agent text is) after a warm-up, and
reads the resident memory of the gateway process and of its workers every `--every`
sessions. Prints one JSON line: per setting the sessions per second, errors, the memory
samples and their least-squares slope in MiB per 1,000 sessions; and the throughput ratio
without / with tracing. A slope near zero once the bounded tables have filled means
nothing grows per session. Linux only (memory is read from /proc).
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import non_negative_int, positive_float, positive_int  # noqa: E402
from benchmarks.bench_servers import free_port, gateway_state_env, wait_ready  # noqa: E402

KEYS = ("sk-soak-tenant-a", "sk-soak-tenant-b")
TOOLS = [{"type": "function", "function": {
    "name": name, "description": f"{name} a document",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
    for name in ("search", "read", "write")]


def vocabulary(seed: int, size: int = 3000) -> list[str]:
    """Pronounceable pseudo-words: repeated like real words, so a tokenizer's word cache
    sees what agent text gives it, not a new string every time."""
    rng = random.Random(seed)
    syllables = [c + v for c in "bcdfghklmnprstvz" for v in "aeiou"]
    return sorted({"".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(size)})


def write_config(path: Path, model: str, port: int, tracing: bool, idle_timeout_s: float,
                 store: Path) -> None:
    tenants = "".join(
        f'[[tenants]]\nname = "t{i}"\napi_key_sha256 = ["{hashlib.sha256(key.encode()).hexdigest()}"]\n'
        "[tenants.limits]\nrequests_per_minute = 1000000\ntokens_per_minute = 1000000000\n\n"
        for i, key in enumerate(KEYS))
    path.write_text(
        f'[server]\nport = {port}\nresponses_db = ":memory:"\n\n'
        f'[[models]]\nname = "m"\nkind = "local"\npath = "{model}"\nnum_workers = 1\n\n'
        f"{tenants}"
        f"[tracing]\nenabled = {str(tracing).lower()}\nsession_idle_timeout_s = {idle_timeout_s}\n"
        f'store_path = "{store}"\n')


def rss_mib(pid: int) -> float:
    """Resident memory of process `pid`, in MiB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found.extend(children)
        todo.extend(children)
    return found


def slope_per_1000(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of memory (MiB) over sessions, per 1,000 sessions."""
    if len(points) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    var = sum((x - mean_x) ** 2 for x, _ in points)
    return round(1000 * sum((x - mean_x) * (y - mean_y) for x, y in points) / var, 3) if var else None


async def drive(base_url: str, first: int, count: int, steps: int, concurrency: int,
                words: list[str], seed: int) -> int:
    """`count` sessions numbered from `first`; the number of failed requests."""
    import httpx
    rng = random.Random(seed + first)
    errors = 0
    gate = asyncio.Semaphore(concurrency)

    async def session(client: httpx.AsyncClient, index: int) -> None:
        nonlocal errors
        key = KEYS[index % len(KEYS)]
        messages = [{"role": "system", "content": f"You are agent {index % 7}. " + " ".join(words[:40])},
                    {"role": "user", "content": " ".join(rng.choices(words, k=rng.randint(5, 60)))}]
        async with gate:
            for _ in range(steps):
                reply = await client.post(
                    f"{base_url}/v1/chat/completions", json={"model": "m", "messages": messages,
                                                             "max_tokens": 4, "tools": TOOLS},
                    headers={"Authorization": f"Bearer {key}", "x-session-id": f"soak-{index}"})
                if reply.status_code != 200:
                    errors += 1
                    return
                messages.append({"role": "assistant",
                                 "content": reply.json()["choices"][0]["message"]["content"] or "ok"})
                messages.append({"role": "user", "content": " ".join(rng.choices(words, k=rng.randint(3, 30)))})

    async with httpx.AsyncClient(timeout=120) as client:
        await asyncio.gather(*(session(client, i) for i in range(first, first + count)))
    return errors


def soak(args: argparse.Namespace, tracing: bool, work: Path) -> dict:
    port = free_port()
    config, log = work / f"soak-{tracing}.toml", work / f"serve-{tracing}.log"
    write_config(config, args.model, port, tracing, args.idle_timeout_s, work / f"traces-{tracing}.sqlite3")
    with open(log, "w") as out:
        server = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--config", str(config)],
                                  stdout=out, stderr=subprocess.STDOUT,
                                  env=dict(os.environ, **gateway_state_env(work / f"state-{tracing}")))
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_ready(f"{base_url}/health", server, log_path=log)
        words = vocabulary(args.seed)
        errors = asyncio.run(drive(base_url, -args.warmup, args.warmup, args.steps, args.concurrency,
                                   words, args.seed))
        samples, started_s, done = [], time.perf_counter(), 0
        while done < args.sessions:
            batch = min(args.every, args.sessions - done)
            errors += asyncio.run(drive(base_url, done, batch, args.steps, args.concurrency, words, args.seed))
            done += batch
            workers = sum(rss_mib(pid) for pid in descendants(server.pid))
            samples.append({"sessions": done, "gateway_mib": round(rss_mib(server.pid), 1),
                            "workers_mib": round(workers, 1)})
            print(f"tracing={tracing}: {done} sessions, gateway {samples[-1]['gateway_mib']} MiB, "
                  f"workers {samples[-1]['workers_mib']} MiB", file=sys.stderr, flush=True)
        wall_s = time.perf_counter() - started_s
    finally:
        server.terminate()
        server.wait(timeout=60)
    return {"sessions_per_s": round(args.sessions / wall_s, 2), "errors": errors, "wall_s": round(wall_s, 1),
            "gateway_mib_per_1000_sessions": slope_per_1000([(s["sessions"], s["gateway_mib"]) for s in samples]),
            "workers_mib_per_1000_sessions": slope_per_1000([(s["sessions"], s["workers_mib"]) for s in samples]),
            "samples": samples}


def main(argv: list[str] | None = None) -> dict:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="tiny", help="tiny (default) or smollm2")
    parser.add_argument("--sessions", type=positive_int, default=3000,
                        help="agent sessions measured after the warm-up")
    parser.add_argument("--every", type=positive_int, default=500, help="sessions between memory readings")
    parser.add_argument("--warmup", type=non_negative_int, default=300, help="sessions before the first reading")
    parser.add_argument("--steps", type=positive_int, default=3, help="chat completions per session")
    parser.add_argument("--concurrency", type=positive_int, default=8, help="sessions in flight at once")
    parser.add_argument("--idle-timeout-s", type=positive_float, default=3.0,
                        help="seconds of quiet after which the gateway ends a session's trace "
                             "([tracing] session_idle_timeout_s)")
    parser.add_argument("--tracing", choices=("both", "on", "off"), default="both",
                        help="which gateways to measure: with tracing on, off, or both (one after the other)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the sessions")
    args = parser.parse_args(argv)
    settings = {"both": (True, False), "on": (True,), "off": (False,)}[args.tracing]
    with tempfile.TemporaryDirectory(prefix="stepahead-soak-") as tmp:
        runs = {("tracing" if on else "no_tracing"): soak(args, on, Path(tmp)) for on in settings}
    out = {"model": args.model, "sessions": args.sessions, "steps": args.steps,
           "concurrency": args.concurrency, "runs": runs}
    if len(runs) == 2:
        out["no_tracing_over_tracing_sessions_per_s"] = round(
            runs["no_tracing"]["sessions_per_s"] / runs["tracing"]["sessions_per_s"], 3)
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
