"""Command line of the workload generator: every WorkloadConfig knob is a flag, each with its range (limits.py)."""
from __future__ import annotations

import argparse
import dataclasses
import sys
from contextlib import AbstractContextManager, nullcontext
from typing import IO

from tqdm import tqdm

from agents_trace.text_table import counted
from agents_trace.workload.generator import MAX_SCHEMA_TOOLS, WorkloadConfig, generate_workload
from agents_trace.workload.limits import (MAX_BATCH_LINES_PER_S, MAX_BLOCK_IDS, MAX_DURATION_S, MAX_REQUESTS,
                                          MAX_SESSION_RATE_PER_S, MAX_SESSIONS, MAX_SIGMA, MAX_TOKENS,
                                          MIN_SESSION_RATE_PER_S)
from agents_trace.workload.tool_patterns import load_patterns
from cache.atomic_file import replacing
from cache.trace_format import TraceHeader, TraceRecord, write_trace


KNOB_HELP = {
    "block_size": "tokens per KV block the hash ids stand for",
    "session_rate_per_s": "new sessions per second, all tenants together (Poisson)",
    "system_prompt_tokens": "each tenant's system prompt length, drawn uniformly",
    "tool_schema_tokens_per_tool": f"tool-schema tokens per tool in a tenant's shared prefix, for at most "
                                   f"{MAX_SCHEMA_TOOLS} tools (a domain with more counts {MAX_SCHEMA_TOOLS}); "
                                   f"0 to {MAX_TOKENS:,}, 0: no tool schemas",
    "user_turn_tokens": "tokens of a user turn, drawn uniformly",
    "tool_result_tokens_median": "median tokens of a tool result (log-normal)",
    "tool_result_tokens_sigma": "log-normal sigma of tool-result tokens",
    "tool_call_output_tokens": "output tokens of a response that calls tools",
    "text_answer_output_tokens": "output tokens of a text answer",
    "tool_median_s_range": "range of the tools' median durations in s (each tool's is fixed)",
    "tool_sigma": "log-normal sigma of a tool's duration",
    "think_time_median_s": "median user think time before a new turn, s (log-normal)",
    "think_time_sigma": "log-normal sigma of the think time",
    "max_context_tokens": "a session ends when its prompt would pass this",
    "batch_lines_per_s": "Batch API lines a second, all tenants together, each a fresh prompt in the flex "
                         "tier without a session (0: none)",
    "batch_prompt_tokens": "prompt tokens of a batch line",
    "batch_output_tokens": "output tokens of a batch line",
    "recorded_turns": "each session has as many user turns as a recorded one (--no-recorded-turns: "
                      "the tool chain alone ends it after a text answer, with the same odds every turn)",
}


RANGES = (f"Ranges (a flag outside its range is one error line, exit status 2): token counts and --block-size "
          f"1 to {MAX_TOKENS:,}; --tenants times --sessions at most {MAX_SESSIONS:,}; --session-rate-per-s "
          f"{MIN_SESSION_RATE_PER_S:g} to {MAX_SESSION_RATE_PER_S:,.0f}; durations (tool medians, think time) at "
          f"most {MAX_DURATION_S:,.0f} s; sigmas 0 to {MAX_SIGMA:g}; --batch-lines-per-s at most "
          f"{MAX_BATCH_LINES_PER_S:,.0f}. The whole workload holds at most {MAX_REQUESTS:,} requests and "
          f"{MAX_BLOCK_IDS:,} block ids (a trace of about {MAX_BLOCK_IDS * 18 / 1e6:,.0f} MB).")


def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = WorkloadConfig()
    parser.epilog = RANGES
    parser.add_argument("--tenants", type=int, default=defaults.num_tenants, dest="num_tenants",
                        help="tenants, each with its own system prompt, tools and patterns (default: %(default)s)")
    parser.add_argument("--sessions", type=int, default=defaults.num_sessions, dest="num_sessions",
                        help="sessions per tenant (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="fixes every draw (default: %(default)s)")
    parser.add_argument("--tool-seed", type=int, default=None, dest="tool_seed",
                        help="fixes each tool's median duration; workloads with the same tool seed are "
                             "other sessions of the same tenants (default: the --seed value)")
    parser.add_argument("-o", "--output", required=True, help="trace file to write ('-' for stdout)")
    parser.add_argument("--patterns", nargs="+", default=None, metavar="FILE",
                        help="tool-sequence JSONL files to learn from (default: the packaged patterns)")
    for field in dataclasses.fields(WorkloadConfig):
        if field.name in ("num_tenants", "num_sessions", "seed", "tool_seed"):
            continue
        flag = "--" + field.name.replace("_", "-")
        default = getattr(defaults, field.name)
        if isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, dest=field.name,
                                help=f"{KNOB_HELP[field.name]} (default: %(default)s)")
        elif isinstance(default, tuple):
            parser.add_argument(flag, type=type(default[0]), nargs=2, default=default, dest=field.name,
                                metavar=("LOW", "HIGH"), help=f"{KNOB_HELP[field.name]} (default: %(default)s)")
        else:
            parser.add_argument(flag, type=type(default), default=default, dest=field.name,
                                help=f"{KNOB_HELP[field.name]} (default: %(default)s)")


def run_generate(args: argparse.Namespace) -> int:
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(WorkloadConfig)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    show_progress = sys.stderr.isatty()
    try:
        config = WorkloadConfig(**values)
        patterns = load_patterns(args.patterns)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    header = TraceHeader(block_size=config.block_size, note=f"stepahead workload generate {values}")
    try:   # the output opened first: a path it cannot write fails before the workload is drawn
        with _output(args.output) as stream:
            with tqdm(total=config.num_tenants * config.num_sessions, unit="session", desc="generate",
                      leave=False, disable=not show_progress) as bar:
                records = generate_workload(config, patterns, on_session=bar.update)
            with tqdm(records, unit="req", desc="write", leave=False, disable=not show_progress) as writing:
                write_trace(stream, writing, header)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if args.output == "-":
            raise   # stdout's reader gone (`| head`): gateway.cli.main's quiet exit
        print(f"error: cannot write {args.output or repr(args.output)}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {summary(records, config.num_tenants)} to {args.output}", file=sys.stderr)
    return 0


def _output(path: str) -> AbstractContextManager[IO]:
    """stdout for '-', else `path` replaced whole when the block ends (a Ctrl+C or an
    error leaves no half trace), with the umask's mode."""
    return nullcontext(sys.stdout) if path == "-" else replacing(path, shared=True)


def summary(records: list[TraceRecord], num_tenants: int) -> str:
    """"N requests in S sessions of T tenant(s)", and the batch lines apart: they have no
    session (counting each tenant's as one would add a session per tenant)."""
    sessions = {(r.tenant, r.session) for r in records if r.session is not None}
    num_batch = sum(1 for r in records if r.session is None)
    in_sessions = f"{counted(len(sessions), 'session')} of {num_tenants} tenant(s)"
    if not num_batch:
        return f"{counted(len(records), 'request')} in {in_sessions}"
    return (f"{counted(len(records), 'request')} ({len(records) - num_batch} in {in_sessions}, and "
            f"{counted(num_batch, 'batch line')} without a session)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stepahead workload", description="agent workload tools")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    generate = sub.add_parser("generate", help="write a multi-tenant agent trace")
    add_generate_arguments(generate)
    args = parser.parse_args(argv)
    return run_generate(args)


def register(subparsers) -> None:
    """`stepahead workload generate ...`"""
    parser = subparsers.add_parser("workload", help="agent workload tools")
    sub = parser.add_subparsers(dest="workload_command", metavar="COMMAND", required=True)
    generate = sub.add_parser("generate", help="write a multi-tenant agent trace")
    add_generate_arguments(generate)
    generate.set_defaults(handler=run_generate)
