"""What streaming tokens costs the gateway's process, per token: a decode pass's messages
sent one by one, or as one `EventBatch`.

Each token a worker decodes reaches the engine (in the gateway's process) as a message:
a pipe read, an unpickling, the engine's lock, the dispatcher, and a wake-up of the
request's event loop. The baseline sends each request's token as its own message (as
before session 34, `event_batches = false`); the contender sends a decode pass's messages
as one (`EventBatch`, the default). Two engines on the tiny model (2 workers each, one
torch thread each) run the same streams, `--streams` at once of `--tokens` greedy tokens,
in alternating rounds after a warm-up; the CPU time this process spends (every thread:
the transports' readers and the event loop reading the streams) is divided by the tokens
streamed. Prints one JSON line: medians of the rounds and `one_by_one_over_batched`.

    python benchmarks/bench_event_batches.py [--streams 8] [--tokens 1000] [--rounds 4]
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import positive_int  # noqa: E402
from shards.engine import LocalEngine  # noqa: E402
from shards.protocol import FinishEvent, SamplingParams, TokenEvent, WorkItem  # noqa: E402


def make_engine(event_batches: bool, max_running: int) -> LocalEngine:
    engine = LocalEngine("tiny", num_workers=2, num_hot_blocks=4096, threads_per_worker=1, max_running=max_running)
    engine.config = dataclasses.replace(engine.config, event_batches=event_batches)
    return engine


async def stream_all(engine: LocalEngine, name: str, num_streams: int, num_tokens: int) -> dict:
    """Run the streams at once; this process's CPU seconds and wall seconds per token."""
    params = SamplingParams(max_tokens=num_tokens, temperature=0.0, ignore_eos=True)
    counts = []

    async def one(i: int) -> None:
        tokens, finished = 0, False
        async for event in engine.generate(WorkItem(f"{name}-{i}", "t", [1 + i % 50, 2, 3, 4] * 8, params)):
            if isinstance(event, TokenEvent):
                tokens += len(event.token_ids)
            finished = finished or isinstance(event, FinishEvent)
        assert finished and tokens == num_tokens, f"stream {i} ended short: {tokens} tokens"
        counts.append(tokens)

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(num_streams)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"cpu_us_per_token": cpu / sum(counts) * 1e6, "tokens_per_s": sum(counts) / wall}


async def run(args: argparse.Namespace) -> dict:
    engines = {"one_by_one": make_engine(False, args.streams), "batched": make_engine(True, args.streams)}
    for engine in engines.values():
        await engine.start()
    try:
        results: dict[str, list[dict]] = {name: [] for name in engines}
        for name, engine in engines.items():   # warm-up
            await stream_all(engine, f"warm-{name}", args.streams, 50)
        for round_index in range(args.rounds):
            order = list(engines) if round_index % 2 == 0 else list(reversed(engines))
            for name in order:
                results[name].append(await stream_all(engines[name], f"{name}-{round_index}", args.streams,
                                                      args.tokens))
    finally:
        for engine in engines.values():
            await engine.stop()
    summary = {name: {"cpu_us_per_token": round(statistics.median(r["cpu_us_per_token"] for r in rows), 1),
                      "tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in rows), 1)}
               for name, rows in results.items()}
    return {"streams": args.streams, "tokens": args.tokens, "rounds": args.rounds, **summary,
            "one_by_one_over_batched": round(summary["one_by_one"]["cpu_us_per_token"]
                                             / summary["batched"]["cpu_us_per_token"], 2)}


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--streams", type=positive_int, default=8, help="streams at once")
    parser.add_argument("--tokens", type=positive_int, default=1000, help="greedy tokens per stream")
    parser.add_argument("--rounds", type=positive_int, default=4,
                        help="alternating timed rounds of both ways; the figures are medians over them")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args))))


if __name__ == "__main__":
    main()
