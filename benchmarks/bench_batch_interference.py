"""Interactive agent steps while a batch runs: does the Batch API slow them down, and do
`[server] batch_yield` (one batch request at a time while others are in flight) and the
flex tier (batch requests served after interactive ones in the engine) help?

    python benchmarks/bench_batch_interference.py [--model smollm2|tiny] [--rounds 1]

One run starts `stepahead serve` four times (fresh processes, the same config but for
the batch settings) and, in each, sends the same interactive steps one after another
(streamed chat completions, each with its own prompt, a pause between them as an agent's
tool runs): alone; while a batch of requests runs with `batch_yield = false` and its
lines asking for `service_tier: "default"` (so the engine treats them as interactive);
the same with `batch_yield = true`; with `batch_yield = true` and lines naming no tier,
so they run as "flex" (the defaults); and flex without yielding. `--modes` picks some
("alone" always runs). Prints one JSON line: each mode's interactive TTFT (p50, p90,
mean) and the batch's wall time; the TTFT ratios against running alone, and each batch's
time against the first batch mode's.
"""
from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from script_args import benchmark_parser  # noqa: E402
from cache.cli_args import non_negative_float, positive_int  # noqa: E402
from bench_servers import (API_KEY, batch_outcome, bench_tenant_toml, fresh_gateway, medians,  # noqa: E402
                           rounded, start_batch)

MODES = {"alone": None, "batch_no_yield": (False, "default"), "batch_yield": (True, "default"),
         "batch_flex": (True, None), "batch_flex_no_yield": (False, None)}   # mode -> (batch_yield, the lines' tier)


def config_toml(model: str, batch_yield: bool, concurrency: int) -> str:
    return f"""
[server]
batch_concurrency = {concurrency}
batch_yield = {str(batch_yield).lower()}

[[models]]
name = "{model}"
kind = "local"
path = "{model}"
num_workers = 2
""" + bench_tenant_toml()


def prompt(tag: str, num_words: int) -> str:
    return f"Task {tag}. " + " ".join(f"note{tag}-{n}" for n in range(num_words)) + "\nSummarize the notes."


def batch_file(model: str, count: int, max_tokens: int, num_words: int, service_tier: str | None) -> bytes:
    tier = {} if service_tier is None else {"service_tier": service_tier}
    return "\n".join(json.dumps({"custom_id": f"b{n}", "method": "POST", "url": "/v1/chat/completions", "body": {
        "model": model, "max_tokens": max_tokens, "ignore_eos": True, **tier,
        "messages": [{"role": "user", "content": prompt(f"batch{n}", num_words)}]}}) for n in range(count)).encode()


async def interactive_steps(client: httpx.AsyncClient, model: str, tag: str, args) -> list[float]:
    ttfts = []
    for n in range(args.steps):
        body = {"model": model, "max_tokens": args.step_tokens, "stream": True, "ignore_eos": True,
                "messages": [{"role": "user", "content": prompt(f"{tag}-{n}", args.prompt_words)}]}
        started_s = time.perf_counter()
        first_s = None
        async with client.stream("POST", "/v1/chat/completions", json=body) as reply:
            async for line in reply.aiter_lines():
                if first_s is None and line.startswith("data: {") and '"content"' in line:
                    first_s = time.perf_counter()
        ttfts.append((first_s or time.perf_counter()) - started_s)
        await asyncio.sleep(args.think_s)
    return ttfts


async def one_mode(base_url: str, model: str, mode: str, tag: str, args) -> dict:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=600) as client:
        batch_id = None
        if MODES[mode] is not None:
            lines = batch_file(model, args.batch_requests, args.batch_tokens, args.prompt_words, MODES[mode][1])
            batch_started_s = time.perf_counter()
            batch_id = await start_batch(client, lines)
            await asyncio.sleep(args.think_s)
        ttfts = await interactive_steps(client, model, tag, args)
        result = {"ttft_p50_s": statistics.median(ttfts), "ttft_p90_s": sorted(ttfts)[int(0.9 * len(ttfts))],
                  "ttft_mean_s": statistics.fmean(ttfts)}
        if batch_id is not None:
            result.update(await batch_outcome(client, batch_id, batch_started_s))
    return rounded(result)


def summarize(runs: dict[str, list[dict]]) -> dict:
    """Each mode's medians over its rounds, and the ratios: each batch mode's mean TTFT
    over running alone's, and its batch's wall time over the first batch mode's (in
    `runs`' order), rounded to 3 places."""
    summary = medians(runs)
    alone = summary["alone"]["ttft_mean_s"]
    batch_modes = [mode for mode in runs if MODES[mode] is not None]
    summary["ttft_mean_over_alone"] = {mode: round(summary[mode]["ttft_mean_s"] / alone, 3) for mode in batch_modes}
    summary["batch_s_over_first"] = {mode: round(summary[mode]["batch_s"] / summary[batch_modes[0]]["batch_s"], 3)
                                     for mode in batch_modes}
    return summary


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="smollm2", choices=("smollm2", "tiny"),
                        help="whose weights the workers load")
    parser.add_argument("--rounds", type=positive_int, default=1, help="each mode this many times, alternating")
    parser.add_argument("--steps", type=positive_int, default=12, help="interactive steps per mode")
    parser.add_argument("--step-tokens", type=positive_int, default=16, help="tokens each interactive step generates")
    parser.add_argument("--prompt-words", type=positive_int, default=120,
                        help="words of each prompt, interactive and batch")
    parser.add_argument("--think-s", type=non_negative_float, default=0.3,
                        help="seconds the interactive session waits between steps")
    parser.add_argument("--batch-requests", type=positive_int, default=24, help="requests in the batch file")
    parser.add_argument("--batch-tokens", type=positive_int, default=48, help="tokens each batch request generates")
    parser.add_argument("--batch-concurrency", type=positive_int, default=2, help="batch requests in flight at once")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    args = parser.parse_args()
    modes = ["alone", *[mode for mode in args.modes.split(",") if mode in MODES and mode != "alone"]]
    runs: dict[str, list[dict]] = {mode: [] for mode in modes}
    for round_index in range(args.rounds):
        for mode in modes:
            batch_settings = MODES[mode]
            config = config_toml(args.model, bool(batch_settings and batch_settings[0]), args.batch_concurrency)
            with fresh_gateway(config, "bench-batch-") as base_url:
                runs[mode].append(asyncio.run(one_mode(base_url, args.model, mode, f"r{round_index}{mode}", args)))
            print(f"round {round_index + 1}/{args.rounds} {mode}: {runs[mode][-1]}", file=sys.stderr)
    summary = summarize(runs)
    print(json.dumps({"benchmark": "batch_interference", "model": args.model, "args": vars(args),
                      "summary": summary, "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
