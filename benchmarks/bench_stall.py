"""Decode stalls: how long newcomers' prefills pause the streams already running, in one
run: prefills first (the default: no decode until a newcomer's first token), and a
`max_decode_stall_s` bound met two ways: due decodes riding the prefill chunks' passes
(`decodes_ride_chunks`, the default) or whole decode passes between chunks.

A one-worker `LocalEngine` (prefix caching off, so every prompt is computed) serves
--streams requests of --stream-tokens tokens each; once they all stream, --newcomers
requests with --prompt-tokens-token prompts arrive every --gap-s seconds. For each
setting it reports the streams' inter-token gaps while newcomers were arriving or
prefilling (p50, p99, max) and the newcomers' time to first token (mean, p50, max), then
the ratios against prefill first: its gaps ÷ the setting's (above 1: the streams gain),
the setting's TTFT ÷ its (above 1: what the newcomers pay). Settings alternate over
--repeats (forward, then backward); figures are medians over the repeats.

    python benchmarks/bench_stall.py --model smollm2 --stall-s 0.3
    python benchmarks/bench_stall.py --model tiny --prompt-tokens 2000   # quick, small effect
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
from cache.cli_args import non_negative_float, positive_int  # noqa: E402
from agents_trace.replay.report import percentile  # noqa: E402
from shards.protocol import FinishEvent, SamplingParams, TokenEvent, WorkItem  # noqa: E402


def _prompt(rng: random.Random, length: int, vocab: int) -> list[int]:
    return [rng.randrange(1, vocab) for _ in range(length)]


def _rounded(figures: dict) -> dict:
    """Seconds to 4 significant digits (sub-millisecond gaps keep their precision)."""
    return {key: value if key == "num_gaps" else float(f"{value:.4g}") for key, value in figures.items()}


async def _run_once(setting: dict, repeat: int, args) -> dict:
    from shards.engine import LocalEngine

    num_tokens = args.streams * (args.stream_prompt_tokens + args.stream_tokens) \
        + args.newcomers * (args.prompt_tokens + args.newcomer_tokens)
    engine = LocalEngine(args.model, 1, num_hot_blocks=num_tokens // 16 + 64, max_running=args.streams + args.newcomers,
                         threads_per_worker=args.threads, prefix_caching=False,
                         prefill_chunk_tokens=args.chunk_tokens, **setting)
    await engine.start()
    try:
        vocab = min(args.vocab, len(engine.tokenizer))
        rng = random.Random(args.seed + repeat)
        streaming = asyncio.Event()
        num_streaming = 0
        stream_times: list[list[float]] = []
        ttfts: list[float] = []

        async def generate(request_id: str, prompt: list[int], max_tokens: int, on_token) -> None:
            item = WorkItem(request_id, "t", prompt,
                            SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True))
            async for event in engine.generate(item):
                if isinstance(event, TokenEvent):
                    on_token(time.perf_counter())
                elif not isinstance(event, FinishEvent):
                    raise RuntimeError(f"request {request_id} failed: {event}")

        async def stream(i: int) -> None:
            times: list[float] = []
            stream_times.append(times)

            def on_token(now: float) -> None:
                nonlocal num_streaming
                times.append(now)
                if len(times) == 1:
                    num_streaming += 1
                    if num_streaming == args.streams:
                        streaming.set()
            await generate(f"s{repeat}-{i}", _prompt(rng, args.stream_prompt_tokens, vocab), args.stream_tokens, on_token)

        async def newcomer(i: int, prompt: list[int]) -> None:
            await asyncio.sleep(i * args.gap_s)
            sent = time.perf_counter()
            first: list[float] = []
            await generate(f"n{repeat}-{i}", prompt, args.newcomer_tokens,
                           lambda now: first.append(now) if not first else None)
            ttfts.append(first[0] - sent)
            window[1] = max(window[1], first[0])

        streams = [asyncio.create_task(stream(i)) for i in range(args.streams)]
        await streaming.wait()
        prompts = [_prompt(rng, args.prompt_tokens, vocab) for _ in range(args.newcomers)]
        window = [time.perf_counter(), 0.0]
        await asyncio.gather(*(newcomer(i, p) for i, p in enumerate(prompts)))
        await asyncio.gather(*streams)
        gaps = [b - a for times in stream_times for a, b in zip(times, times[1:]) if window[0] <= b <= window[1]]
        if not gaps:
            raise RuntimeError("the streams ended before the newcomers came: raise --stream-tokens")
        return {"itl_p50_s": percentile(gaps, 50), "itl_p99_s": percentile(gaps, 99), "itl_max_s": max(gaps),
                "ttft_mean_s": statistics.fmean(ttfts), "ttft_p50_s": percentile(ttfts, 50), "ttft_max_s": max(ttfts),
                "num_gaps": len(gaps)}
    finally:
        await engine.stop()


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="smollm2", help="tiny, smollm2, or a model directory")
    parser.add_argument("--stall-s", type=non_negative_float, default=0.3,
                        help="the max_decode_stall_s bound compared, in seconds")
    parser.add_argument("--chunk-tokens", type=positive_int, default=128, help="prefill_chunk_tokens, both settings")
    parser.add_argument("--streams", type=positive_int, default=8, help="requests streaming when newcomers come")
    parser.add_argument("--stream-prompt-tokens", type=positive_int, default=64,
                        help="tokens of each stream's prompt")
    parser.add_argument("--stream-tokens", type=positive_int, default=160, help="tokens each stream generates")
    parser.add_argument("--newcomers", type=positive_int, default=6, help="requests arriving while the streams run")
    parser.add_argument("--prompt-tokens", type=positive_int, default=512, help="each newcomer's prompt")
    parser.add_argument("--newcomer-tokens", type=positive_int, default=4, help="tokens each newcomer generates")
    parser.add_argument("--gap-s", type=non_negative_float, default=1.0, help="between newcomers")
    parser.add_argument("--repeats", type=positive_int, default=2,
                        help="runs of each setting, alternating; the figures are their medians")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads of the worker")
    parser.add_argument("--vocab", type=positive_int, default=1000, help="prompt token ids are drawn below this")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the prompts' token ids")
    args = parser.parse_args()
    settings = {"prefill_first": {},
                "bound_rides": {"max_decode_stall_s": args.stall_s, "decodes_ride_chunks": True},
                "bound_passes": {"max_decode_stall_s": args.stall_s, "decodes_ride_chunks": False}}
    runs: dict[str, list[dict]] = {name: [] for name in settings}
    for repeat in range(args.repeats):
        order = list(settings) if repeat % 2 == 0 else list(reversed(settings))
        for name in order:
            result = asyncio.run(_run_once(settings[name], repeat, args))
            runs[name].append(result)
            print(json.dumps({"progress": name, "repeat": repeat, **_rounded(result)}),
                  file=sys.stderr, flush=True)
    medians = {name: {key: statistics.median(r[key] for r in results) for key in results[0]}
               for name, results in runs.items()}
    first = medians["prefill_first"]
    ratios = {}
    for name in ("bound_rides", "bound_passes"):
        other = medians[name]
        ratios[f"itl_p99_first_over_{name}"] = round(first["itl_p99_s"] / other["itl_p99_s"], 3)
        ratios[f"itl_max_first_over_{name}"] = round(first["itl_max_s"] / other["itl_max_s"], 3)
        ratios[f"ttft_mean_{name}_over_first"] = round(other["ttft_mean_s"] / first["ttft_mean_s"], 3)
    print(json.dumps({
        "model": args.model, "stall_s": args.stall_s, "chunk_tokens": args.chunk_tokens, "streams": args.streams,
        "newcomers": args.newcomers, "prompt_tokens": args.prompt_tokens, "repeats": args.repeats,
        **{name: _rounded(m) for name, m in medians.items()}, **ratios}))


if __name__ == "__main__":
    main()
