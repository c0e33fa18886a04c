"""Batched decode: tokens per second with N requests decoding at once, one forward pass per
request (`decode_batch` 1, the old engine) against one pass for all (the default).

Two levels, both in one run, baseline and contender alternating:
- runner: N requests of --prompt-tokens each are prefilled, then --steps decode steps
  are timed, `ModelRunner.step` for each request in turn vs `ModelRunner.step_many`
  once; median over --repeats. `same_tokens`: whether greedy decoding gave the same
  tokens both ways (float rounding may differ in batched matrix products).
- engine (--engine): a one-worker `LocalEngine` with `decode_batch` 1, then 16; N
  concurrent requests of --max-tokens each; wall time until all have finished and the
  median inter-token gap a client sees.
Prints one JSON line per N and level, with the ratio serial ÷ batched.

    python benchmarks/bench_decode.py --model smollm2 --threads 1
    python benchmarks/bench_decode.py --model tiny --engine
    python benchmarks/bench_decode.py --model smollm2 --device cuda

On a GPU every timed section ends with a device synchronize.
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
from cache.cli_args import non_negative_int, positive_int, positive_ints  # noqa: E402
import torch  # noqa: E402

from shards.model_loader import load_model  # noqa: E402
from shards.model_runner import ModelRunner  # noqa: E402
from shards.protocol import FinishEvent, SamplingParams, TokenEvent, WorkItem  # noqa: E402


def _prompts(num: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(100, vocab) for _ in range(length)] for _ in range(num)]


def runner_level(loaded, num: int, args) -> dict:
    params = SamplingParams(max_tokens=args.steps + 1, temperature=0.0, ignore_eos=True)
    blocks = num * (args.prompt_tokens + args.steps) // 16 + 16
    times = {"serial": [], "batched": []}
    outputs = {}
    for repeat in range(args.repeats):
        for mode in (("serial", "batched") if repeat % 2 == 0 else ("batched", "serial")):
            runner = ModelRunner(loaded, num_hot_blocks=blocks, block_size=16, prefix_caching=False)
            seqs = []
            for i, prompt in enumerate(_prompts(num, args.prompt_tokens, args.vocab, args.seed)):
                seq, _ = runner.start(WorkItem(f"r{i}", "t", prompt, params), loaded.tokenizer)
                seqs.append(seq)
            start = time.perf_counter()
            for _ in range(args.steps):
                if mode == "serial":
                    for seq in seqs:
                        runner.step(seq)
                else:
                    runner.step_many(seqs)
            runner.synchronize()
            times[mode].append((time.perf_counter() - start) / args.steps)
            outputs[mode] = [seq.output_ids for seq in seqs]
    serial, batched = statistics.median(times["serial"]), statistics.median(times["batched"])
    return {"level": "runner", "requests": num, "prompt_tokens": args.prompt_tokens,
            # 4 significant digits: a tiny model's step is a fraction of a millisecond
            "serial_step_s": float(f"{serial:.4g}"), "batched_step_s": float(f"{batched:.4g}"),
            "serial_tokens_per_s": round(num / serial, 1), "batched_tokens_per_s": round(num / batched, 1),
            "speedup": round(serial / batched, 3), "same_tokens": outputs["serial"] == outputs["batched"]}


async def _engine_run(model: str, decode_batch: int, num: int, args) -> tuple[float, float]:
    from shards.engine import LocalEngine

    engine = LocalEngine(model, 1, num_hot_blocks=num * (args.prompt_tokens + args.max_tokens) // 16 + 64,
                         max_running=max(8, num), decode_batch=decode_batch,
                         threads_per_worker=args.threads or None, prefix_caching=False,
                         device=args.device, dtype=args.dtype)
    await engine.start()
    try:
        vocab = min(args.vocab, len(engine.tokenizer))
        gaps: list[float] = []

        async def one(i: int, prompt: list[int]) -> None:
            item = WorkItem(f"r{decode_batch}-{i}", "t", prompt,
                            SamplingParams(max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True))
            last = None
            async for event in engine.generate(item):
                if isinstance(event, TokenEvent):
                    now = time.perf_counter()
                    if last is not None:
                        gaps.append(now - last)
                    last = now
                elif not isinstance(event, FinishEvent):
                    raise RuntimeError(f"request failed: {event}")

        await one(-1, _prompts(1, 8, vocab, args.seed + 1)[0])  # warm-up
        gaps.clear()
        start = time.perf_counter()
        await asyncio.gather(*(one(i, p) for i, p in enumerate(_prompts(num, args.prompt_tokens, vocab, args.seed))))
        return time.perf_counter() - start, statistics.median(gaps)
    finally:
        await engine.stop()


def engine_level(model: str, num: int, args) -> dict:
    serial_s, serial_gap = asyncio.run(_engine_run(model, 1, num, args))
    batched_s, batched_gap = asyncio.run(_engine_run(model, 16, num, args))
    tokens = num * args.max_tokens
    return {"level": "engine", "requests": num, "max_tokens": args.max_tokens,
            "serial_wall_s": round(serial_s, 3), "batched_wall_s": round(batched_s, 3),
            "serial_tokens_per_s": round(tokens / serial_s, 1), "batched_tokens_per_s": round(tokens / batched_s, 1),
            "serial_itl_p50_s": round(serial_gap, 4), "batched_itl_p50_s": round(batched_gap, 4),
            "speedup": round(serial_s / batched_s, 3)}


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="tiny", help="tiny, smollm2, or a model directory")
    parser.add_argument("--batch-sizes", type=positive_ints, default="1,2,4,8,16", help="concurrent requests N")
    parser.add_argument("--prompt-tokens", type=positive_int, default=512, help="tokens of each request's prompt")
    parser.add_argument("--steps", type=positive_int, default=16, help="timed decode steps (runner level)")
    parser.add_argument("--max-tokens", type=positive_int, default=32, help="tokens per request (engine level)")
    parser.add_argument("--repeats", type=positive_int, default=3,
                        help="timed runs per setting; the figures are their medians")
    parser.add_argument("--threads", type=non_negative_int, default=1, help="torch threads (0: all cores)")
    parser.add_argument("--vocab", type=positive_int, default=1000, help="prompt token ids are drawn below this")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the prompts' token ids")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16", "auto"),
                        help="weights and KV dtype, the same at both levels")
    parser.add_argument("--engine", action="store_true", help="also time the engine level")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = list(args.batch_sizes)
    loaded = load_model(args.model, device=args.device, dtype=args.dtype)
    args.vocab = min(args.vocab, len(loaded.tokenizer))
    for num in sizes:
        print(json.dumps({"model": loaded.model_id, **runner_level(loaded, num, args)}), flush=True)
    if args.engine:
        for num in sizes:
            print(json.dumps({"model": loaded.model_id, **engine_level(args.model, num, args)}), flush=True)


if __name__ == "__main__":
    main()
