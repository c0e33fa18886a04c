"""Command line of the simulator: one replay and one JSON line, or a side-by-side sweep.

    python -m cache.sim --trace FILE --hot-blocks N [--host-blocks M]
        [--policy lru|predictive|ttl|kvflow|belady] [--block-size B] [--measure-from-frac F] --json

Reads a `stepahead-trace/1` or Mooncake trace (through `cache.trace_format`; `--trace -`
reads stdin), replays it (replay.py) and prints `{"policy", "hot_blocks", "host_blocks", "requests",
"block_hit_rate", "token_hit_rate", "host_hit_rate", "sim_ttft_p50_s", "sim_ttft_p99_s",
"prefetch_used_frac", "wall_s", ...}`. `wall_s` covers reading the trace and the replay.
`--calibration` picks the engine dtype the costs were measured in, and every cost
constant is also a flag of its own (cost_model.py documents the calibrations). Requests
marked `"service_tier": "flex"` (an extension of the format; the trace store exports it)
are served as the server serves flex requests: their blocks leave a full tier first
(`--no-flex-first`: not), and one without a session is a batch line (no session, no
forecasts); the line then adds `flex_requests`, `flex_evictions` and the other requests'
own `interactive_block_hit_rate`, `interactive_ttft_p50_s` and `interactive_ttft_mean_s`.

`--hold` replays the requests as running for a while, as a worker serves them: each holds
its blocks from its arrival until it ends (its simulated TTFT, then its output tokens at
`--decode-s-per-token` each; cost_model.py says where the default comes from), so a
request can find the hot tier full of blocks in use (replay.py); its line adds `"hold":
true` and `decode_s_per_token`. Without it a request releases its blocks at once, and the
line is as it always was. `--decode-s-per-token` without `--hold` is a usage error.

`--policy` and `--hot-blocks` also take comma-separated lists (`--policy all`: every
policy): each pair then runs on the same trace, and the output is a table comparing them
at each memory size (LRU's mean TTFT over each policy's, and the share of the LRU ->
Belady gap closed; sweep.py), or with `--json` one JSON line per run. `--plot IMAGE` draws
hit rate and TTFT against HOT blocks, for any runs (a single run is one point). A single
policy at a single size prints exactly the one JSON line above (the plot's path to stderr). Every figure of the line, counts too (`evictions`, `flex_evictions`,
`prefetched_blocks`, `prefetch_used_frac`), covers the measured requests alone
(`--measure-from-frac`).

`--block-size` is the block size of a trace without a header (default: Mooncake's 512):
a header names the size its `hash_ids` stand for, so a trace whose header names another
is refused (one line, exit 2), never read as blocks of the wrong size.

Every flag is checked before the trace is read, as argparse does (one line, exit 2):
times and costs are finite and >= 0, `--copy-bytes-per-s` > 0, `--measure-from-frac` in
[0, 1), each tier at most MAX_BLOCKS blocks (its slots are allocated up front), and a
`--plot` that cannot be written, or in a format matplotlib does not write, is refused
before the runs, not after them: with one run as with several. A trace that a policy
which ticks would tick over MAX_TICKS times (`too_many_ticks`: most often a time in the
wrong unit) is one `error:` line naming its span and longest pause, and exit 2.

Ctrl+C stops it with one line on stderr and exit status 130, no traceback: a sweep first
prints the runs that finished (their table; with `--json` their lines are out already).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from tqdm import tqdm

from cache.cli_args import finite_float, integer, non_negative_float, non_negative_int, positive_float
from cache.stdout_reader import INTERRUPTED_EXIT
from cache.sim.cost_model import CALIBRATIONS, COPY_BYTES_PER_S, DECODE_S_PER_TOKEN, DEFAULT_CALIBRATION, CostModel
from cache.sim.replay import POLICY_NAMES, UNFORECAST_POLICIES, SimConfig, replay, split_index
from cache.sim.requests import SimRequest, to_sim_requests
from cache.sim.sweep import comparison_rows, comparison_table, plot_policies, plot_problem
from cache.trace_format import MAX_TOKENS_PER_CALL, BlockSizeConflict, TraceFormatError, read_trace
from cache.trace_input import STDIN_PATH

MAX_BLOCKS = 10_000_000   # per tier: a pool's slots take ~50 bytes each (0.5 GB), more than any real cache
MAX_TICKS = 10_000_000   # policy ticks over a trace: each is a pass of the policy's upkeep
DEFAULT_TICK_INTERVAL_S = 0.25
AT_MOST_BLOCKS = f"at most {MAX_BLOCKS:,} (each block's slot costs memory, about 50 bytes)"


class SimulatedTimesOverflow(ArithmeticError):
    """A run's simulated times are not finite (cost flags too large): its JSON would hold
    NaN or Infinity, which JSON does not have."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cache.sim", description="replay a trace through a cache policy")
    parser.add_argument("--trace", required=True,
                        help=f"stepahead-trace/1 or Mooncake JSONL file ({STDIN_PATH}: stdin)")
    parser.add_argument("--hot-blocks", type=_sizes, required=True,
                        help=f"HOT tier blocks (at most {MAX_BLOCKS:,}); several, comma-separated, for a sweep")
    parser.add_argument("--host-blocks", type=_host_blocks, default=0,
                        help="host tier blocks, where HOT demotes to and prefetches from (default 0: none; "
                             f"at most {MAX_BLOCKS:,})")
    parser.add_argument("--policy", type=_policies, default=("lru",),
                        help=f"the cache policy: one of {', '.join(POLICY_NAMES)}, several comma-separated, or all "
                             "(default: lru)")
    parser.add_argument("--block-size", type=_block_size, default=None,
                        help="tokens per block of a trace without a header (default: 512, Mooncake's); a trace "
                             "whose header names another block size is refused")
    parser.add_argument("--measure-from-frac", type=_fraction, default=0.0,
                        help="requests before this fraction of the trace, in [0, 1), only warm the cache up and are "
                             "not counted (default 0: every request counts)")
    parser.add_argument("--tick-interval-s", type=non_negative_float, default=None,   # None: not passed
                        help="trace seconds between the policy's ticks (re-plans, prefetches; 0: none; lru and "
                             f"belady never tick; default {DEFAULT_TICK_INTERVAL_S:g})")
    parser.add_argument("--calibration", choices=list(CALIBRATIONS), default=DEFAULT_CALIBRATION,
                        help="the engine dtype whose measured costs set the three constants below "
                             "(cost_model.py; default: %(default)s)")
    parser.add_argument("--prefill-s-per-token", type=non_negative_float, default=None,
                        help="seconds of prefill per prompt token not served from the cache (default: the "
                             "--calibration's)")
    parser.add_argument("--request-overhead-s", type=non_negative_float, default=None,
                        help="seconds every request costs besides its prefill, added to its TTFT (default: the "
                             "--calibration's)")
    parser.add_argument("--kv-bytes-per-token", type=non_negative_int, default=None,
                        help="bytes of KV cache per token, which set what copying a block from the host tier "
                             "costs (default: the --calibration's)")
    parser.add_argument("--copy-bytes-per-s", type=positive_float, default=COPY_BYTES_PER_S,
                        help="host to HOT copy bandwidth, bytes/s (default %(default)g)")
    parser.add_argument("--host-to-hot-s-per-block", type=non_negative_float, default=None,
                        help="default: block_size * kv_bytes_per_token / copy_bytes_per_s")
    parser.add_argument("--hold", action="store_true",
                        help="a request holds its blocks until it ends (TTFT, then its output at "
                             "--decode-s-per-token), so requests in flight fill the hot tier; default: "
                             "released at once")
    parser.add_argument("--decode-s-per-token", type=non_negative_float, default=None,
                        help=f"with --hold: seconds per output token (default {DECODE_S_PER_TOKEN:g}, SmolLM2 decoding "
                             "one request on this CPU)")
    parser.add_argument("--no-flex-first", dest="flex_first", action="store_false",
                        help="let blocks of requests marked service_tier \"flex\" compete like any (the server's "
                             "flex_blocks_evicted_first = false); by default they go first")
    parser.add_argument("--json", action="store_true",
                        help="print JSON lines (one run: always one JSON line)")
    parser.add_argument("--plot", metavar="IMAGE",
                        help="draw hit rate and TTFT against HOT blocks to this image (PNG, or another format "
                             "matplotlib writes, by its suffix; checked before the runs); one run is one point")
    return parser


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a block count or a comma-separated list of them: {text!r}") from None
    if any(size <= 0 for size in sizes):
        raise argparse.ArgumentTypeError("HOT block counts must be > 0")
    if any(size > MAX_BLOCKS for size in sizes):
        raise argparse.ArgumentTypeError(f"HOT block counts must be {AT_MOST_BLOCKS}")
    return tuple(dict.fromkeys(sizes))


def _host_blocks(text: str) -> int:
    size = non_negative_int(text)
    if size > MAX_BLOCKS:
        raise argparse.ArgumentTypeError(f"must be {AT_MOST_BLOCKS}")
    return size


def _block_size(text: str) -> int:
    """Tokens per block: from 1 to the most tokens a call may have."""
    value = integer(text)
    if not 1 <= value <= MAX_TOKENS_PER_CALL:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_TOKENS_PER_CALL:,}, got {text!r}")
    return value


def _fraction(text: str) -> float:
    value = finite_float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1), got {text!r}")
    return value


def _policies(text: str) -> tuple[str, ...]:
    if text.strip() == "all":
        return POLICY_NAMES
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",")))
    if "all" in names:
        raise argparse.ArgumentTypeError(f"'all' (every policy) stands alone, not in a list; list the policies "
                                         f"instead, out of {', '.join(POLICY_NAMES)}")
    unknown = [name for name in names if name not in POLICY_NAMES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown policy {unknown[0]!r}; choose from {', '.join(POLICY_NAMES)} "
                                         "(several comma-separated), or all alone")
    return names


def too_many_ticks(requests: list[SimRequest], tick_interval_s: float) -> tuple[str, float] | None:
    """None when ticks every `tick_interval_s` (0: none) over the trace's span are at most
    MAX_TICKS; else the trace's span and its longest pause in words (that pause is the
    likely culprit of an absurd span: a time in the wrong unit), and the least interval
    that fits. Every time with %g: a span of 1e300 s is no 300-digit number."""
    times = [request.t_s for request in requests]
    span_s = times[-1] - times[0]   # the reader keeps arrivals in order
    if tick_interval_s <= 0 or span_s / tick_interval_s <= MAX_TICKS:
        return None
    after = max(range(1, len(times)), key=lambda i: times[i] - times[i - 1])   # the first of equal pauses
    pause_s = times[after] - times[after - 1]
    return (f"its requests span {span_s:g} s, its longest pause {pause_s:g} s (before request {after + 1} of "
            f"{len(times)}, at t = {times[after]:g} s)"), span_s / MAX_TICKS


def _tick_problem(parser: argparse.ArgumentParser, args: argparse.Namespace, requests: list[SimRequest],
                  interval_s: float) -> str | None:
    """The error line for a trace that a policy which ticks would tick too often over
    (None: no such problem). A `--tick-interval-s` passed makes it a usage error of that
    flag, as argparse words one (it exits 2); at the default, the trace is at fault, so its
    times lead and the flag is named as a way out, not as what was wrong."""
    if all(policy in UNFORECAST_POLICIES for policy in args.policy):   # lru and belady never tick
        return None
    found = too_many_ticks(requests, interval_s)
    if found is None:
        return None
    trace, least_s = found
    if args.tick_interval_s is not None:
        parser.error(f"argument --tick-interval-s: {interval_s:g} s makes over {MAX_TICKS:,} ticks over this trace: "
                     f"{trace} (at least {least_s:.3g} s, or 0 for none)")
    return (f"error: {args.trace}: {trace}: a policy that ticks, every {interval_s:g} s by default, would tick over "
            f"{MAX_TICKS:,} times; if a time is in the wrong unit, fix the trace, else pass --tick-interval-s "
            f"{least_s:.3g} or more (0: no ticks)")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.decode_s_per_token is not None and not args.hold:
        parser.error("argument --decode-s-per-token: only with --hold (it sets how long a request holds its blocks)")
    if args.plot:
        problem = plot_problem(Path(args.plot))
        if problem is not None:
            parser.error(f"argument --plot: {args.plot}: {problem}")
    try:
        header, records = read_trace(args.trace, args.block_size)
    except BlockSizeConflict as exc:
        print(f"error: --block-size {args.block_size} does not fit {args.trace}: {exc} (leave the flag out)",
              file=sys.stderr)
        return 2
    except (OSError, TraceFormatError) as exc:
        print(f"error: cannot read {args.trace}: {exc}", file=sys.stderr)
        return 2
    if not records:
        print(f"error: {args.trace} holds no requests to replay", file=sys.stderr)
        return 2
    block_size = header.block_size
    cost = CostModel.for_block_size(
        block_size,
        calibration=args.calibration,
        prefill_s_per_token=args.prefill_s_per_token,
        request_overhead_s=args.request_overhead_s,
        kv_bytes_per_token=args.kv_bytes_per_token,
        copy_bytes_per_s=args.copy_bytes_per_s,
        host_to_hot_s_per_block=args.host_to_hot_s_per_block,
        decode_s_per_token=args.decode_s_per_token,
    )
    requests = to_sim_requests(records, block_size)
    tick_interval_s = DEFAULT_TICK_INTERVAL_S if args.tick_interval_s is None else args.tick_interval_s
    problem = _tick_problem(parser, args, requests, tick_interval_s)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2

    def run(policy: str, hot_blocks: int) -> dict:
        config = SimConfig(num_hot_blocks=hot_blocks, num_host_blocks=args.host_blocks, policy=policy,
                           block_size=block_size, cost=cost, tick_interval_s=tick_interval_s,
                           measure_from=split_index(len(requests), args.measure_from_frac),
                           flex_first=args.flex_first, hold=args.hold)
        result = replay(requests, config).to_json()
        if not all(math.isfinite(value) for value in result.values() if isinstance(value, float)):
            raise SimulatedTimesOverflow("the simulated times overflow to infinity: lower the cost flags")
        return result

    pairs = [(policy, hot) for hot in args.hot_blocks for policy in args.policy]
    runs: list[dict] = []
    try:
        if len(pairs) == 1:
            result = run(*pairs[0])
            result["wall_s"] = round(time.perf_counter() - started, 3)
            print(json.dumps({**result, "calibration": args.calibration}), flush=True)
            runs = [{**result, "label": pairs[0][0]}]
        else:
            for policy, hot in tqdm(pairs, desc="simulating", unit="run", file=sys.stderr, disable=None):
                began = time.perf_counter()
                result = {**run(policy, hot), "label": policy, "calibration": args.calibration}
                result["wall_s"] = round(time.perf_counter() - began, 3)
                runs.append(result)
                if args.json:
                    print(json.dumps(result), flush=True)
    except SimulatedTimesOverflow as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:   # Ctrl+C: the runs that finished, as the stepahead commands stop
        if runs and not args.json:
            print(comparison_table(comparison_rows(runs)), flush=True)
        print(f"python -m cache.sim: stopped after {len(runs)} of {len(pairs)} runs", file=sys.stderr)
        return INTERRUPTED_EXIT
    if len(runs) > 1 and not args.json:
        print(comparison_table(comparison_rows(runs)))
    if args.plot:
        try:
            plot_policies(runs, Path(args.plot), f"{Path(args.trace).name}: {len(requests)} requests, "
                                                 f"{block_size}-token blocks, HOST {args.host_blocks}")
        except OSError as exc:
            print(f"error: cannot write the plot to {args.plot}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        except (RuntimeError, ValueError) as exc:   # a format whose writer needs what is missing (pgf: LaTeX)
            print(f"error: cannot draw the plot to {args.plot}: {exc}".splitlines()[0], file=sys.stderr)
            return 2
        print(f"plot: {args.plot}", file=sys.stderr)
    return 0
