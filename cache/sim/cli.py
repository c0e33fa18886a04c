"""Command line of the simulator: one replay, one JSON line.

    python -m cache.sim --trace FILE --hot-blocks N [--host-blocks M]
        [--policy lru|predictive|ttl|kvflow|belady] [--block-size B] [--measure-from-frac F] --json

Reads a `stepahead-trace/1` or Mooncake trace (through `cache.trace_format`), replays it
(replay.py) and prints `{"policy", "hot_blocks", "host_blocks", "requests",
"block_hit_rate", "token_hit_rate", "host_hit_rate", "sim_ttft_p50_s", "sim_ttft_p99_s",
"prefetch_used_frac", "wall_s", ...}`. `wall_s` covers reading the trace and the replay.
`--calibration` picks the engine dtype the costs were measured in, and every cost
constant is also a flag of its own (cost_model.py documents the calibrations).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from cache.sim.cost_model import CALIBRATIONS, COPY_BYTES_PER_S, DEFAULT_CALIBRATION, CostModel
from cache.sim.replay import POLICY_NAMES, SimConfig, replay, split_index
from cache.sim.requests import to_sim_requests
from cache.trace_format import TraceFormatError, read_trace


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cache.sim", description="replay a trace through a cache policy")
    parser.add_argument("--trace", required=True, help="stepahead-trace/1 or Mooncake JSONL file")
    parser.add_argument("--hot-blocks", type=int, required=True)
    parser.add_argument("--host-blocks", type=int, default=0)
    parser.add_argument("--policy", choices=POLICY_NAMES, default="lru")
    parser.add_argument("--block-size", type=int, default=None, help="tokens per block (default: the trace header's)")
    parser.add_argument("--measure-from-frac", type=float, default=0.0,
                        help="requests before this fraction only warm up (not counted)")
    parser.add_argument("--tick-interval-s", type=float, default=0.25)
    parser.add_argument("--calibration", choices=list(CALIBRATIONS), default=DEFAULT_CALIBRATION,
                        help="the engine dtype whose measured costs set the three constants below "
                             "(cost_model.py; default: %(default)s)")
    parser.add_argument("--prefill-s-per-token", type=float, default=None, help="default: the calibration's")
    parser.add_argument("--request-overhead-s", type=float, default=None, help="default: the calibration's")
    parser.add_argument("--kv-bytes-per-token", type=int, default=None, help="default: the calibration's")
    parser.add_argument("--copy-bytes-per-s", type=float, default=COPY_BYTES_PER_S)
    parser.add_argument("--host-to-hot-s-per-block", type=float, default=None,
                        help="default: block_size * kv_bytes_per_token / copy_bytes_per_s")
    parser.add_argument("--json", action="store_true", help="print one JSON line (the only output format)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.perf_counter()
    if args.hot_blocks <= 0 or args.host_blocks < 0 or (args.block_size is not None and args.block_size <= 0):
        print("error: need --hot-blocks > 0, --host-blocks >= 0 and --block-size > 0", file=sys.stderr)
        return 2
    try:
        header, records = read_trace(args.trace)
    except (OSError, TraceFormatError) as exc:
        print(f"error: cannot read {args.trace}: {exc}", file=sys.stderr)
        return 2
    if not records:
        print(f"error: {args.trace} holds no requests to replay", file=sys.stderr)
        return 2
    block_size = args.block_size or header.block_size
    cost = CostModel.for_block_size(
        block_size,
        calibration=args.calibration,
        prefill_s_per_token=args.prefill_s_per_token,
        request_overhead_s=args.request_overhead_s,
        kv_bytes_per_token=args.kv_bytes_per_token,
        copy_bytes_per_s=args.copy_bytes_per_s,
        host_to_hot_s_per_block=args.host_to_hot_s_per_block,
    )
    requests = to_sim_requests(records, block_size)
    config = SimConfig(
        num_hot_blocks=args.hot_blocks,
        num_host_blocks=args.host_blocks,
        policy=args.policy,
        block_size=block_size,
        cost=cost,
        tick_interval_s=args.tick_interval_s,
        measure_from=split_index(len(requests), args.measure_from_frac),
    )
    result = replay(requests, config)
    result.wall_s = time.perf_counter() - started
    print(json.dumps({**result.to_json(), "calibration": args.calibration}))
    return 0
