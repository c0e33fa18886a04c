"""The simulator's cost model, measured on this machine's engine: prints the constants
to pass to `python -m cache.sim` (or to add to cache/sim/cost_model.py's CALIBRATIONS).

Times cold prefills (nothing cached: a new tenant each time) of several prompt lengths
through the engine's real request path, and fits the line the simulator charges,
    ttft_s = request_overhead_s + prefill_s_per_token * prompt tokens,
by least squares (medians of --repeats per length, after a warm-up). KV bytes per token
come from the model's layout in the chosen dtype (they set the HOST->HOT copy cost).
Prints one JSON line: the points, the fit, its largest relative error, and the flags.

    python benchmarks/calibrate_sim.py --model smollm2                  # dtype auto
    python benchmarks/calibrate_sim.py --model smollm2 --dtype float32
"""
from __future__ import annotations

import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.script_args import benchmark_parser  # noqa: E402
import torch  # noqa: E402

from benchmarks.bench_prefix_reuse import request_ttft_s  # noqa: E402
from cache.cli_args import non_negative_int, positive_int, positive_ints  # noqa: E402
from shards.model_files import ModelLoadError  # noqa: E402
from shards.model_loader import choose_dtype, load_model  # noqa: E402
from shards.model_runner import ModelRunner  # noqa: E402


def fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through (x, y) points; needs two
    distinct x. A negative intercept is clipped to 0 (the slope refitted through 0)."""
    xs, ys = [x for x, _ in points], [y for _, y in points]
    slope, intercept = statistics.linear_regression(xs, ys)  # StatisticsError (a ValueError) if x is constant
    if intercept < 0:
        return 0.0, statistics.linear_regression(xs, ys, proportional=True).slope
    return intercept, slope


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--model", default="smollm2", help="tiny, smollm2, or a model directory")
    parser.add_argument("--dtype", default="auto",
                        help="the engine dtype: float32, bfloat16, float16 or auto (bfloat16 where the CPU computes it "
                             "natively)")
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda or cuda:N")
    parser.add_argument("--lengths", type=positive_ints, default=(256, 512, 1024, 2048),
                        help="prompt tokens, comma-separated, at least two different (default: 256,512,1024,2048)")
    parser.add_argument("--repeats", type=positive_int, default=5,
                        help="timed prefills per length (default %(default)s)")
    parser.add_argument("--threads", type=non_negative_int, default=0, help="torch threads (0: all cores)")
    args = parser.parse_args()
    if len(set(args.lengths)) < 2:   # the fit is a line through the points
        parser.error(f"argument --lengths: needs at least two different lengths, got {args.lengths}")
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = choose_dtype(args.dtype, args.model, args.device)
    try:
        loaded = load_model(args.model, dtype=dtype, device=args.device)
    except ModelLoadError as exc:
        parser.error(f"argument --model: {exc}")
    lengths = list(args.lengths)
    runner = ModelRunner(loaded, num_hot_blocks=max(lengths) // 16 * 2 + 16, block_size=16)
    vocab = min(loaded.model.config.vocab_size, len(loaded.tokenizer)) - 8
    rng = random.Random(0)
    counter = iter(range(10**9))

    def cold(length: int) -> float:
        runner.blocks.clear()
        tokens = [rng.randrange(vocab) for _ in range(length)]
        return request_ttft_s(runner, loaded.tokenizer, f"r{next(counter)}", f"t{next(counter)}", tokens)

    cold(lengths[0])  # warm-up
    points = [(length, statistics.median(cold(length) for _ in range(args.repeats))) for length in lengths]
    overhead_s, per_token_s = (float(f"{value:.4g}") for value in fit_line(points))
    if per_token_s <= 0:   # noise larger than the lengths' difference: no usable cost model
        sys.exit(f"calibrate_sim: the prefill times {[[n, round(s, 5)] for n, s in points]} do not grow "
                 "with the prompt length (a busy machine?); rerun with more --repeats or lengths further apart")
    kv_bytes = runner.layout.bytes_per_block // runner.layout.block_size
    worst = max(abs(overhead_s + per_token_s * n - s) / s for n, s in points)
    print(json.dumps({
        "model": loaded.model_id, "dtype": dtype, "device": str(runner.device), "threads": torch.get_num_threads(),
        "points": [[n, round(s, 5)] for n, s in points], "prefill_s_per_token": per_token_s,
        "request_overhead_s": overhead_s, "kv_bytes_per_token": kv_bytes,
        "max_relative_error": round(worst, 3),
        "sim_flags": f"--prefill-s-per-token {per_token_s} --request-overhead-s {overhead_s} "
                     f"--kv-bytes-per-token {kv_bytes}"}), flush=True)


if __name__ == "__main__":
    main()
