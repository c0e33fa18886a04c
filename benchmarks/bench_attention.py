"""Decode attention: transformers' SDPA (`enable_gqa`) against stepahead's grouped lone
query (`shards.batched_decode.one_query_attention`), at long cached contexts.

Each of N requests gets a cache of --contexts tokens (random keys and values: the time of
a decode step does not depend on them, and prefilling 8k-token prompts on a CPU would
take minutes), then --steps decode steps are timed with `decode_rows` (N > 1) or a
single-sequence forward (N = 1), with the baseline attention and ours alternating, on
fresh copies of the same caches; median over --repeats. The baseline swaps our function
for transformers' own `sdpa_attention_forward` for the duration of its timing (this
script's A/B switch; the product has no such switch). `max_abs_diff`: the largest
difference between the two ways' logits. Prints one JSON line per (context, N).

    python benchmarks/bench_attention.py --model smollm2 --contexts 512,2048,8192 --batch-sizes 1,8
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: E402

import shards.batched_decode as batched_decode  # noqa: E402
from shards.batched_decode import decode_rows, enable_row_batching  # noqa: E402
from shards.kv_cache import make_cache  # noqa: E402
from shards.model_loader import load_model  # noqa: E402


def _transformers_lone_query(module, query, key, value, **kwargs):
    return sdpa_attention_forward(module, query, key, value, None, **kwargs)[0]


@contextmanager
def _attention(kind: str):
    ours = batched_decode.one_query_attention
    if kind == "transformers":
        batched_decode.one_query_attention = _transformers_lone_query
    try:
        yield
    finally:
        batched_decode.one_query_attention = ours


def _caches(config, num: int, length: int, dtype, device, seed: int) -> list:
    gen = torch.Generator().manual_seed(seed)
    kv_heads = config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    shape = (1, kv_heads, length, head_dim)
    return [[(torch.randn(shape, generator=gen).to(device, dtype), torch.randn(shape, generator=gen).to(device, dtype))
             for _ in range(config.num_hidden_layers)] for _ in range(num)]


def _run(model, config, stored, steps: int, device) -> tuple[float, torch.Tensor]:
    caches = [make_cache(config, [(k.clone(), v.clone()) for k, v in layers]) for layers in stored]
    tokens = list(range(100, 100 + len(caches)))
    decode_rows(model, tokens, caches, device)  # warm-up step; it also moves the caches into growable buffers
    start = time.perf_counter()
    for _ in range(steps):
        logits = decode_rows(model, tokens, caches, device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / steps, logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny", help="tiny, smollm2, or a model directory")
    parser.add_argument("--contexts", default="512,2048,8192", help="cached tokens per request")
    parser.add_argument("--batch-sizes", default="1,8", help="requests decoding at once")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: all cores)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model(args.model, device=args.device)
    model, config = loaded.model, loaded.model.config
    if not enable_row_batching(model):
        raise SystemExit(f"{args.model} does not run on the row attention")
    first = next(model.parameters())
    for length in (int(n) for n in args.contexts.split(",")):
        for num in (int(n) for n in args.batch_sizes.split(",")):
            stored = _caches(config, num, length, first.dtype, first.device, args.seed)
            times: dict[str, list[float]] = {"transformers": [], "grouped": []}
            logits = {}
            for repeat in range(args.repeats):
                for kind in (("transformers", "grouped") if repeat % 2 == 0 else ("grouped", "transformers")):
                    with _attention(kind):
                        step_s, logits[kind] = _run(model, config, stored, args.steps, first.device)
                    times[kind].append(step_s)
            base, ours = statistics.median(times["transformers"]), statistics.median(times["grouped"])
            print(json.dumps({
                "model": loaded.model_id, "context_tokens": length, "requests": num,
                "transformers_step_s": float(f"{base:.4g}"), "grouped_step_s": float(f"{ours:.4g}"),
                "speedup": round(base / ours, 3),
                "max_abs_diff": float(f"{(logits['transformers'] - logits['grouped']).abs().max().item():.3g}"),
            }), flush=True)


if __name__ == "__main__":
    main()
