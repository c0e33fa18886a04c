"""Attention at long cached contexts: transformers' SDPA attention against stepahead's
`shards.batched_decode.gqa_attention`, for decode steps and for prefills after a prefix.

Caches of --contexts tokens hold random keys and values: a pass's time does not depend
on them, and prefilling 8k-token prompts on a CPU would take minutes. Two levels, the
baseline and ours alternating on fresh copies of the same caches, median of --repeats:
- decode: N requests (--batch-sizes), --steps decode steps with `decode_rows`;
- suffix: one request prefills --suffix-tokens new tokens after its cached context
  (what a prefix-cache hit leaves to compute: the TTFT of an agent's next step).
The baseline swaps our function for transformers' own `sdpa_attention_forward` for the
duration of its timing (this script's A/B switch; the product has no such switch).
`max_abs_diff`: the largest difference between the two ways' logits. Prints one JSON
line per (level, context, N or suffix).

    python benchmarks/bench_attention.py --model smollm2 --contexts 512,2048,8192 --batch-sizes 1,8 --suffix-tokens 64,512
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
from cache.cli_args import non_negative_int, positive_int, positive_ints  # noqa: E402
import torch  # noqa: E402
from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: E402

import shards.batched_decode as batched_decode  # noqa: E402
from shards.batched_decode import decode_rows, enable_row_batching  # noqa: E402
from shards.kv_cache import make_cache  # noqa: E402
from shards.model_loader import load_model  # noqa: E402


def _transformers_attention(module, query, key, value, attention_mask, **kwargs):
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)[0]


@contextmanager
def _attention(kind: str):
    ours = batched_decode.gqa_attention
    if kind == "transformers":
        batched_decode.gqa_attention = _transformers_attention
    try:
        yield
    finally:
        batched_decode.gqa_attention = ours


def _caches(config, num: int, length: int, dtype, device, seed: int) -> list:
    gen = torch.Generator().manual_seed(seed)
    kv_heads = config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    shape = (1, kv_heads, length, head_dim)
    return [[(torch.randn(shape, generator=gen).to(device, dtype), torch.randn(shape, generator=gen).to(device, dtype))
             for _ in range(config.num_hidden_layers)] for _ in range(num)]


def _timed(fn, device) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, out


@torch.inference_mode()
def _suffix(model, config, stored, num_tokens: int, device) -> tuple[float, torch.Tensor]:
    (layers,) = stored
    cache = make_cache(config, [(k.clone(), v.clone()) for k, v in layers])
    length = layers[0][0].shape[-2]
    ids = torch.arange(100, 100 + num_tokens, device=device)[None]
    positions = torch.arange(length, length + num_tokens, device=device)[None]
    return _timed(lambda: model(input_ids=ids, cache=cache, position_ids=positions, use_cache=True,
                                logits_to_keep=1).logits[0, -1], device)


def _decode(model, config, stored, steps: int, device) -> tuple[float, torch.Tensor]:
    caches = [make_cache(config, [(k.clone(), v.clone()) for k, v in layers]) for layers in stored]
    tokens = list(range(100, 100 + len(caches)))
    decode_rows(model, tokens, caches, device)  # warm-up step; it also moves the caches into growable buffers

    def run():
        for _ in range(steps):
            logits = decode_rows(model, tokens, caches, device)
        return logits

    total_s, logits = _timed(run, device)
    return total_s / steps, logits


def _compare(run, repeats: int) -> dict:
    """`run()` -> (seconds, logits) with each attention, alternating; medians."""
    times: dict[str, list[float]] = {"transformers": [], "grouped": []}
    logits = {}
    for repeat in range(repeats):
        for kind in (("transformers", "grouped") if repeat % 2 == 0 else ("grouped", "transformers")):
            with _attention(kind):
                seconds, logits[kind] = run()
            times[kind].append(seconds)
    base, ours = statistics.median(times["transformers"]), statistics.median(times["grouped"])
    return {"transformers_s": float(f"{base:.4g}"), "grouped_s": float(f"{ours:.4g}"), "speedup": round(base / ours, 3),
            "max_abs_diff": float(f"{(logits['transformers'] - logits['grouped']).abs().max().item():.3g}")}


def optional_positive_ints(text: str) -> tuple[int, ...]:
    """--suffix-tokens: comma-separated integers >= 1, or "" for none."""
    return positive_ints(text) if text else ()


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="tiny", help="tiny, smollm2, or a model directory")
    parser.add_argument("--contexts", type=positive_ints, default="512,2048,8192", help="cached tokens per request")
    parser.add_argument("--batch-sizes", type=positive_ints, default="1,8", help="requests decoding at once")
    parser.add_argument("--suffix-tokens", type=optional_positive_ints, default="64,512",
                        help='new tokens prefilled after the context, comma-separated ("": the decode level alone)')
    parser.add_argument("--steps", type=positive_int, default=8, help="decode steps timed per decode run")
    parser.add_argument("--repeats", type=positive_int, default=3,
                        help="timed runs of each way; the figures are their medians")
    parser.add_argument("--threads", type=non_negative_int, default=1, help="torch threads (0: all cores)")
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda or cuda:N")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the cached keys and values")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model(args.model, device=args.device)
    model, config = loaded.model, loaded.model.config
    if not enable_row_batching(model):
        raise SystemExit(f"{args.model} does not run on the row attention")
    first = next(model.parameters())
    device = first.device
    for length in args.contexts:
        for num in args.batch_sizes:
            stored = _caches(config, num, length, first.dtype, device, args.seed)
            row = _compare(lambda: _decode(model, config, stored, args.steps, device), args.repeats)
            print(json.dumps({"model": loaded.model_id, "level": "decode", "context_tokens": length, "requests": num,
                              **row}), flush=True)
        stored = _caches(config, 1, length, first.dtype, device, args.seed)
        for num_tokens in args.suffix_tokens:
            row = _compare(lambda: _suffix(model, config, stored, num_tokens, device), args.repeats)
            print(json.dumps({"model": loaded.model_id, "level": "suffix", "context_tokens": length,
                              "suffix_tokens": num_tokens, **row}), flush=True)


if __name__ == "__main__":
    main()
