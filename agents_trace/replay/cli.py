"""`stepahead replay TRACE --base-url URL --api-key KEY [...]`."""
from __future__ import annotations

import argparse
import asyncio
import json
import sys

import aiohttp

from agents_trace.replay.report import build_report, format_table
from agents_trace.replay.runner import NoModelListed, ReplayOptions, replay
from cache.trace_format import TraceFormatError, read_trace


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", help="stepahead-trace/1 or Mooncake JSONL file")
    parser.add_argument("--base-url", required=True, help="gateway URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--api-key", required=True, help="key for tenants without --tenant-key")
    parser.add_argument("--tenant-key", action="append", default=[], metavar="TENANT=KEY",
                        help="API key for one of the trace's tenants (repeatable)")
    parser.add_argument("--model", default=None, help="model id (default: the gateway's first)")
    parser.add_argument("--speed", type=float, default=1.0, help="time scale: 2 replays twice as fast")
    parser.add_argument("--concurrency", type=int, default=16, help="max requests in flight")
    parser.add_argument("--max-input-tokens", type=int, default=None, help="cut longer prompts")
    parser.add_argument("--max-output-tokens", type=int, default=None, help="cap generated tokens")
    parser.add_argument("--vocab-size", type=int, default=256, help="token ids are drawn below this")
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N requests")
    parser.add_argument("--json", action="store_true", help="print one JSON line at the end")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--no-step-hints", action="store_true",
                        help="do not tell the gateway the recorded tool steps (stepahead_replay)")


def run_replay(args: argparse.Namespace) -> int:
    if args.speed <= 0:
        print("error: --speed must be positive", file=sys.stderr)
        return 2
    if args.concurrency < 1 or (args.limit is not None and args.limit < 1):
        print("error: --concurrency and --limit must be at least 1", file=sys.stderr)
        return 2
    tenant_keys = {}
    for item in args.tenant_key:
        tenant, sep, key = item.partition("=")
        if not sep or not tenant or not key:
            print(f"error: --tenant-key expects TENANT=KEY, got {item!r}", file=sys.stderr)
            return 2
        tenant_keys[tenant] = key
    try:
        header, records = read_trace(args.trace)
    except (OSError, TraceFormatError) as exc:
        print(f"error: cannot read {args.trace}: {exc}", file=sys.stderr)
        return 2
    if args.limit is not None:
        records = records[: args.limit]
    if not records:
        print(f"error: {args.trace} holds no requests to replay", file=sys.stderr)
        return 2
    options = ReplayOptions(
        base_url=args.base_url.rstrip("/").removesuffix("/v1"), api_key=args.api_key,
        tenant_keys=tenant_keys, model=args.model, speed=args.speed, concurrency=args.concurrency,
        max_input_tokens=args.max_input_tokens, max_output_tokens=args.max_output_tokens,
        vocab_size=args.vocab_size, progress=not args.no_progress and sys.stderr.isatty(),
        step_hints=not args.no_step_hints)
    try:
        outcome = asyncio.run(replay(records, header, options))
    except (aiohttp.ClientError, asyncio.TimeoutError, NoModelListed) as exc:
        print(f"error: cannot list the models of {options.base_url} (is the gateway up, and the key "
              f"right? or pass --model): {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a second Ctrl+C while the first one's aborts ran
        print("stepahead replay: stopped", file=sys.stderr)
        return 130
    if outcome.interrupted:
        print(f"stepahead replay: stopped after {len(outcome.results)} of {outcome.num_planned} requests"
              " (requests in flight were aborted)", file=sys.stderr)
        if not outcome.results:
            return 130
    report = build_report(outcome.results, outcome.wall_s,
                          num_planned=outcome.num_planned if outcome.interrupted else None)
    if args.json:
        print(json.dumps(report, separators=(",", ":")))
    else:
        print(format_table(report))
    if outcome.interrupted:
        return 130
    return 0 if report["total"]["errors"] == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stepahead replay", description="replay a trace against a gateway")
    add_replay_arguments(parser)
    return run_replay(parser.parse_args(argv))


def register(subparsers) -> None:
    """`stepahead replay ...`"""
    parser = subparsers.add_parser("replay", help="replay a trace against a live gateway",
                                   description="Replay a stepahead-trace/1 or Mooncake trace against a gateway.")
    add_replay_arguments(parser)
    parser.set_defaults(handler=run_replay)
