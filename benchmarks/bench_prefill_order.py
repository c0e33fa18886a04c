"""Prefill order: the admitted prefill with the earliest deadline first (shortest remaining,
with aging; the default) against arrival order, on one worker, in one run.

A one-worker `LocalEngine` with prefix caching serves a stream of agent steps arriving
at random (Poisson, --rate per second): a --cold-share of them are cold prompts of
--cold-tokens tokens, the rest are warm steps, each continuing one of --sessions
sessions whose --warm-prefix-tokens prefix is already cached, with --warm-new-tokens new
tokens. So warm steps are short prefills and cold ones long, as in an agent workload
where the cache works. Each step generates --output-tokens tokens. Both orders see the
same arrivals and prompts; they alternate over --repeats (forward, then backward) and
the figures are medians over repeats: time to first token (mean, p50, p99, and the mean
for warm and for cold steps), then arrival ÷ deadline for each (above 1: deadline wins).

    python benchmarks/bench_prefill_order.py                 # SmolLM2, about 7 minutes
    python benchmarks/bench_prefill_order.py --model tiny --rate 8 --cold-tokens 4000
"""
from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import non_negative_float, positive_float, positive_int  # noqa: E402
from agents_trace.replay.report import percentile  # noqa: E402
from shards.prefill_order import PREFILL_ORDERS  # noqa: E402
from shards.protocol import FinishEvent, SamplingParams, TokenEvent, WorkItem  # noqa: E402


def workload(args, vocab: int, seed: int) -> tuple[list[list[int]], list[tuple[float, bool, list[int]]]]:
    """(the sessions' cached prefixes, the timed steps as (arrival s, is cold, prompt))."""
    rng = random.Random(seed)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(1, vocab) for _ in range(n)]

    prefixes = [tokens(args.warm_prefix_tokens) for _ in range(args.sessions)]
    steps, now = [], 0.0
    for _ in range(args.steps):
        now += rng.expovariate(args.rate)
        cold = rng.random() < args.cold_share
        prompt = tokens(args.cold_tokens) if cold else rng.choice(prefixes) + tokens(args.warm_new_tokens)
        steps.append((now, cold, prompt))
    return prefixes, steps


async def replay_once(order: str, args, seed: int) -> dict:
    from shards.engine import LocalEngine

    engine = LocalEngine(args.model, 1, num_hot_blocks=args.hot_blocks, threads_per_worker=args.threads,
                         max_running=args.max_running, prefill_order=order)
    await engine.start()
    try:
        prefixes, steps = workload(args, min(args.vocab, len(engine.tokenizer)), seed)

        async def first_token_s(request_id: str, prompt: list[int], max_tokens: int) -> float:
            sent, first = time.perf_counter(), None
            item = WorkItem(request_id, "t", prompt, SamplingParams(max_tokens=max_tokens, temperature=0.0,
                                                                    ignore_eos=True))
            async for event in engine.generate(item):
                if isinstance(event, TokenEvent) and first is None:
                    first = time.perf_counter()
                elif not isinstance(event, (TokenEvent, FinishEvent)):
                    raise RuntimeError(f"request {request_id} failed: {event}")
            return first - sent

        for index, prefix in enumerate(prefixes):  # warm the sessions' prefixes
            await first_token_s(f"warm-{index}", prefix, 1)
        start = time.perf_counter()

        async def step(index: int, at_s: float, prompt: list[int]) -> float:
            await asyncio.sleep(max(0.0, start + at_s - time.perf_counter()))
            return await first_token_s(f"step-{index}", prompt, args.output_tokens)

        ttfts = await asyncio.gather(*(step(i, at, prompt) for i, (at, _, prompt) in enumerate(steps)))
        warm = [t for t, (_, cold, _) in zip(ttfts, steps) if not cold]
        cold = [t for t, (_, cold, _) in zip(ttfts, steps) if cold]
        return {"ttft_mean_s": statistics.fmean(ttfts), "ttft_p50_s": percentile(ttfts, 50),
                "ttft_p99_s": percentile(ttfts, 99), "warm_ttft_mean_s": statistics.fmean(warm),
                "cold_ttft_mean_s": statistics.fmean(cold) if cold else 0.0,
                "num_warm": len(warm), "num_cold": len(cold), "wall_s": time.perf_counter() - start}
    finally:
        await engine.stop()


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="smollm2", help="tiny, smollm2, or a model directory")
    parser.add_argument("--steps", type=positive_int, default=80, help="timed agent steps per replay")
    parser.add_argument("--rate", type=positive_float, default=1.6, help="steps per second (Poisson)")
    parser.add_argument("--cold-share", type=non_negative_float, default=0.3,
                        help="fraction of the steps that are cold prompts (0 to 1)")
    parser.add_argument("--cold-tokens", type=positive_int, default=2000, help="tokens of each cold prompt")
    parser.add_argument("--sessions", type=positive_int, default=8, help="warm sessions the warm steps continue")
    parser.add_argument("--warm-prefix-tokens", type=positive_int, default=1800,
                        help="tokens of each warm session's cached prefix")
    parser.add_argument("--warm-new-tokens", type=positive_int, default=200,
                        help="new tokens of each warm step after its prefix")
    parser.add_argument("--output-tokens", type=positive_int, default=4, help="tokens each step generates")
    parser.add_argument("--max-running", type=positive_int, default=8, help="requests the worker runs at once")
    parser.add_argument("--hot-blocks", type=positive_int, default=4096, help="ample: warm prefixes stay cached")
    parser.add_argument("--threads", type=positive_int, default=2, help="torch threads of the worker")
    parser.add_argument("--vocab", type=positive_int, default=1000, help="prompt token ids are drawn below this")
    parser.add_argument("--repeats", type=positive_int, default=3,
                        help="runs of each order, alternating; the figures are their medians")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the arrivals and prompts")
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {order: [] for order in PREFILL_ORDERS}
    for repeat in range(args.repeats):
        orders = list(PREFILL_ORDERS) if repeat % 2 == 0 else list(reversed(PREFILL_ORDERS))
        for order in orders:
            result = asyncio.run(replay_once(order, args, args.seed + repeat))
            runs[order].append(result)
            print(json.dumps({"progress": order, "repeat": repeat, **result}), file=sys.stderr, flush=True)
    medians = {order: {key: round(statistics.median(r[key] for r in results), 4) for key in results[0]}
               for order, results in runs.items()}
    ratios = {f"arrival_over_deadline_{key}": round(medians["arrival"][key] / medians["deadline"][key], 3)
              for key in ("ttft_mean_s", "ttft_p50_s", "ttft_p99_s", "warm_ttft_mean_s", "cold_ttft_mean_s")
              if medians["deadline"][key] > 0}
    paired = [a["ttft_mean_s"] / d["ttft_mean_s"] for a, d in zip(runs["arrival"], runs["deadline"])]
    print(json.dumps({"model": args.model, "rate_per_s": args.rate, "steps": args.steps,
                      "cold_share": args.cold_share, "cold_tokens": args.cold_tokens,
                      "warm_new_tokens": args.warm_new_tokens, "repeats": args.repeats, **medians, **ratios,
                      "arrival_over_deadline_ttft_mean_per_repeat": [round(r, 3) for r in paired]}))


if __name__ == "__main__":
    main()
