"""Prefix reuse in the engine: time to first token with and without a cached prefix.

For each prefix length P (a 64-token suffix follows), in one process and one run:
- cold_ttft_s: the whole prompt is prefilled (a tenant with nothing cached);
- warm_ttft_s: the P-token prefix was cached by an earlier request, only the suffix runs;
- suffix_only_floor_s: the forward pass over the 64 new tokens with a cache object that
  is already built (the least any cache could cost);
- speedup = cold / warm, overhead_ratio = warm / floor.
Medians over --repeats runs after a warm-up. Prints one JSON line per P.

    python benchmarks/bench_prefix_reuse.py --model tiny
    python benchmarks/bench_prefix_reuse.py --model smollm2
    python benchmarks/bench_prefix_reuse.py --model smollm2 --device cuda

On a GPU every timed section ends with a device synchronize, so kernels queued
asynchronously are counted.
"""
from __future__ import annotations

import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
import torch  # noqa: E402
from transformers import DynamicCache  # noqa: E402

from cache.cli_args import non_negative_int, positive_int, positive_ints  # noqa: E402
from shards.model_files import ModelLoadError  # noqa: E402
from shards.model_loader import DTYPES, load_model  # noqa: E402
from shards.model_runner import ModelRunner  # noqa: E402
from shards.protocol import SamplingParams, WorkItem  # noqa: E402

SUFFIX_TOKENS = 64


def request_ttft_s(runner: ModelRunner, tokenizer, request_id: str, tenant: str, tokens: list[int]) -> float:
    """Time to first token of one greedy request through the runner's real path (hash,
    match, prefill of what is not cached, sample); its blocks stay cached."""
    item = WorkItem(request_id, tenant, tokens, SamplingParams(max_tokens=1, temperature=0.0))
    seq, _ = runner.start(item, tokenizer)
    runner.finish(seq)
    return seq.first_token_s - seq.started_s


def timed(fn, synchronize=lambda: None) -> float:
    start = time.perf_counter()
    fn()
    synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="tiny", help="tiny, smollm2, or a model directory")
    parser.add_argument("--prefix-lengths", type=positive_ints, default=(256, 1024, 2048, 4096),
                        help="prefix tokens P, comma-separated (default: 256,1024,2048,4096)")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed runs per P (default %(default)s)")
    parser.add_argument("--threads", type=non_negative_int, default=0, help="torch threads (0: all cores)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the prompts' token ids")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--dtype", default="float32", choices=list(DTYPES),
                        help="weights and KV dtype")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    try:
        loaded = load_model(args.model, dtype=args.dtype, device=args.device)
    except ModelLoadError as exc:
        parser.error(f"argument --model: {exc}")
    vocab = min(loaded.model.config.vocab_size, len(loaded.tokenizer)) - 8
    lengths = list(args.prefix_lengths)
    num_blocks = (max(lengths) + SUFFIX_TOKENS) // 16 * 4 + 64
    runner = ModelRunner(loaded, num_hot_blocks=num_blocks, block_size=16)
    counter = iter(range(10**9))

    def request(tenant: str, tokens: list[int]) -> float:
        return request_ttft_s(runner, loaded.tokenizer, f"r{next(counter)}", tenant, tokens)

    for length in lengths:
        prefix = [rng.randrange(vocab) for _ in range(length)]
        suffixes = [[rng.randrange(vocab) for _ in range(SUFFIX_TOKENS)] for _ in range(args.repeats + 1)]
        request("warmup", prefix + suffixes[0])
        cold = [request(f"cold{next(counter)}", prefix + s) for s in suffixes[1:]]
        request("warm", prefix)  # caches the prefix
        warm = [request("warm", prefix + s) for s in suffixes[1:]]
        # the floor: suffix forward over a ready cache object, plus sampling
        _, cache = runner.forward(prefix, None, 0)
        kv = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
        floor = []
        for s in suffixes[1:]:
            ready = DynamicCache(ddp_cache_data=kv, config=loaded.model.config)
            floor.append(timed(lambda s=s, c=ready: runner.forward(s, c, length)[0].argmax().item(),
                               runner.synchronize))
        stats = runner.blocks.stats()
        cold_s, warm_s, floor_s = (statistics.median(x) for x in (cold, warm, floor))
        print(json.dumps({
            "model": loaded.model_id, "prefix_tokens": length, "suffix_tokens": SUFFIX_TOKENS,
            "threads": torch.get_num_threads(), "device": str(runner.device),
            "dtype": str(runner.layout.dtype).removeprefix("torch."),
            "cold_ttft_s": round(cold_s, 5), "warm_ttft_s": round(warm_s, 5),
            "speedup": round(cold_s / warm_s, 2), "suffix_only_floor_s": round(floor_s, 5),
            "overhead_ratio": round(warm_s / floor_s, 3), "repeats": args.repeats,
        }), flush=True)
        runner.blocks.clear()
        del stats


if __name__ == "__main__":
    main()
