"""Command line of the workload generator: every WorkloadConfig knob is a flag."""
from __future__ import annotations

import argparse
import dataclasses
import sys

from agents_trace.workload.generator import WorkloadConfig, generate_workload
from agents_trace.workload.tool_patterns import load_patterns
from cache.trace_format import TraceHeader, write_trace


def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = WorkloadConfig()
    parser.add_argument("--tenants", type=int, default=defaults.num_tenants, dest="num_tenants")
    parser.add_argument("--sessions", type=int, default=defaults.num_sessions, dest="num_sessions",
                        help="sessions per tenant")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("-o", "--output", required=True, help="trace file to write ('-' for stdout)")
    parser.add_argument("--patterns", nargs="*", default=None,
                        help="tool-sequence JSONL files to learn from (default: the packaged patterns)")
    for field in dataclasses.fields(WorkloadConfig):
        if field.name in ("num_tenants", "num_sessions", "seed"):
            continue
        flag = "--" + field.name.replace("_", "-")
        default = getattr(defaults, field.name)
        if isinstance(default, tuple):
            parser.add_argument(flag, type=type(default[0]), nargs=2, default=default, dest=field.name,
                                metavar=("LOW", "HIGH"))
        else:
            parser.add_argument(flag, type=type(default), default=default, dest=field.name)


def run_generate(args: argparse.Namespace) -> int:
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(WorkloadConfig)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    config = WorkloadConfig(**values)
    records = generate_workload(config, load_patterns(args.patterns))
    header = TraceHeader(block_size=config.block_size, note=f"stepahead workload generate {values}")
    if args.output == "-":
        count = write_trace(sys.stdout, records, header)
    else:
        with open(args.output, "w", encoding="utf-8") as stream:
            count = write_trace(stream, records, header)
    sessions = len({(r.tenant, r.session) for r in records})
    print(f"wrote {count} requests in {sessions} sessions of {config.num_tenants} tenants "
          f"to {args.output}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stepahead workload", description="agent workload tools")
    sub = parser.add_subparsers(dest="command", required=True)
    generate = sub.add_parser("generate", help="write a multi-tenant agent trace")
    add_generate_arguments(generate)
    args = parser.parse_args(argv)
    return run_generate(args)


def register(subparsers) -> None:
    """`stepahead workload generate ...`"""
    parser = subparsers.add_parser("workload", help="agent workload tools")
    sub = parser.add_subparsers(dest="workload_command", required=True)
    generate = sub.add_parser("generate", help="write a multi-tenant agent trace")
    add_generate_arguments(generate)
    generate.set_defaults(handler=run_generate)
