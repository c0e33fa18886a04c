"""`stepahead replay TRACE --base-url URL --api-key KEY [...]`.

Every bad flag (a `--base-url` that is no http(s) URL with a host among them) and an
unreadable trace is one `error: ...` line and exit status 2, before anything connects; so
is a trace whose replay would run longer than MAX_REPLAY_S at its `--speed` (a time in the
wrong unit, most often: the replay would wait in silence), a gateway that cannot be
reached (with `--model` too, checked once before the first request), and a `--model` its
/v1/models does not list.
An interrupted replay reports what ended, even nothing (zero counts: a script reading
the `--json` line always gets one, once this command runs: a Ctrl+C while the trace is
read too): Ctrl+C with exit status 130, a gateway that stopped
answering mid-replay with one `error:` line and EXIT_GATEWAY_STOPPED. Otherwise the
status is 0, or 1 when some requests failed (the report counts them). A `--tenant-key` for a tenant the trace does not have is a
one-line warning naming the trace's tenants, not an error: one set of keys can then
serve several traces, and a misspelt tenant still shows before the replay starts.
`--tenant-keys-file` keeps keys out of `ps` (a `--tenant-key` wins over it); its errors name
a line, never a key, and a file others can read is a warning, not an error (tenant_keys.py).
`--api-key` may be left out when those keys cover every tenant the replay sends for (else
one `error:` line, exit status 2); the /v1/models lookup asks with `--api-key`, then with
the tenants' keys, so a refused or absent `--api-key` does not stop it (QA221 F5).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from urllib.parse import urlsplit

import aiohttp

from agents_trace.replay.report import build_report, format_table, late_send_warning
from agents_trace.replay.prompts import DEFAULT_FIRST_TOKEN_ID, MIN_VOCAB_SIZE
from agents_trace.replay.model_lookup import GatewayUnreachable, ModelNotServed, NoModelListed
from agents_trace.replay.runner import ReplayOptions, last_due_s, replay, sent_as_one_token
from agents_trace.replay.tenant_keys import tenant_keys_file, unknown_tenants_warning
from cache.trace_format import TraceFormatError, TraceHeader, TraceRecord, read_trace
from cache.trace_input import STDIN_PATH

MAX_MODELS_NAMED = 10
EXIT_GATEWAY_STOPPED = 3   # the gateway stopped answering mid-replay (docs/replay.md)
MAX_REPLAY_S = 86_400.0   # a day: a replay due to run longer is refused (docs/replay.md)


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", help=f"stepahead-trace/1 or Mooncake JSONL file ({STDIN_PATH}: stdin)")
    parser.add_argument("--base-url", required=True, help="gateway URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--api-key", default=None,
                        help="key for tenants without a key of their own (needed unless --tenant-key / "
                             "--tenant-keys-file give every tenant of the trace one); the model lookup asks "
                             "/v1/models with it first, then with the tenants' keys")
    parser.add_argument("--tenant-key", action="append", default=[], metavar="TENANT=KEY",
                        help="API key for one of the trace's tenants (repeatable; wins over --tenant-keys-file)")
    parser.add_argument("--tenant-keys-file", default=None, metavar="FILE",
                        help="TENANT=KEY lines, one a tenant (blank lines and # comment lines allowed): the keys "
                             "stay out of the process list and shell history; keep it chmod 600")
    parser.add_argument("--model", default=None, help="model id (default: the gateway's first)")
    parser.add_argument("--speed", type=float, default=1.0, help="time scale: 2 replays twice as fast (default: 1)")
    parser.add_argument("--concurrency", type=int, default=16, help="max requests in flight (default: 16)")
    parser.add_argument("--max-input-tokens", type=int, default=None,
                        help="cut longer prompts, keeping the head (a chat line's by characters, to about N: "
                             "docs/replay.md; default: no cut, the trace's own lengths)")
    parser.add_argument("--max-output-tokens", type=int, default=None,
                        help="cap generated tokens (default: no cap, the trace's own output_tokens)")
    parser.add_argument("--vocab-size", type=int, default=256,
                        help=f"token ids are drawn below this (at least {MIN_VOCAB_SIZE}; default: 256)")
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N requests")
    parser.add_argument("--json", action="store_true", help="print one JSON line at the end")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--no-step-hints", action="store_true",
                        help="do not tell the gateway the recorded tool steps (stepahead_replay)")
    parser.add_argument("--session-suffix", default="", metavar="TEXT",
                        help="add TEXT to every session id sent, so the replay is traced as sessions of "
                             "its own (e.g. against the gateway whose store recorded the trace); a TEXT "
                             "starting with '-' takes '=': --session-suffix=-r1")


def flag_error(args: argparse.Namespace) -> str | None:
    """What is wrong with `--base-url` or the numeric flags (None: nothing)."""
    problem = base_url_problem(args.base_url)
    if problem is not None:
        return problem
    if args.model is not None and not args.model.strip():
        return f"--model must name a model (leave it out for the gateway's first), got {args.model!r}"
    if not math.isfinite(args.speed) or args.speed <= 0:
        return f"--speed must be positive and finite, got {args.speed}"
    for flag, value in (("--concurrency", args.concurrency), ("--limit", args.limit),
                        ("--max-input-tokens", args.max_input_tokens),
                        ("--max-output-tokens", args.max_output_tokens)):
        if value is not None and value < 1:
            return f"{flag} must be at least 1, got {value}"
    if args.vocab_size < MIN_VOCAB_SIZE:
        return f"--vocab-size must be at least {MIN_VOCAB_SIZE} (token ids are drawn from " \
               f"{DEFAULT_FIRST_TOKEN_ID} up to below it), got {args.vocab_size}"
    return None


def base_url_problem(base_url: str) -> str | None:
    """What keeps `base_url` from being a gateway's address (None: nothing): it must be
    an http:// or https:// URL with a host, and a port, when it names one, from 1 to 65535."""
    try:
        url = urlsplit(base_url)
        port = url.port
    except ValueError as exc:   # a port that is not a number, or out of range; a broken IPv6 address
        return f"--base-url must be an http:// or https:// URL, such as http://127.0.0.1:8000, got {base_url!r} " \
               f"({exc})"
    if url.scheme not in ("http", "https") or not url.hostname:
        return f"--base-url must be an http:// or https:// URL with a host, such as http://127.0.0.1:8000, " \
               f"got {base_url!r}"
    if port is not None and not 1 <= port <= 65535:
        return f"--base-url's port must be from 1 to 65535, got {base_url!r}"
    return None


def too_long_problem(records: list[TraceRecord], speed: float) -> str | None:
    """Why a replay of `records` at `speed` is refused (None: it is not): its last request
    is due over MAX_REPLAY_S after its first, even with every reply instant. Most often a
    time in the wrong unit (one line in milliseconds among seconds), which would keep the
    replay waiting, silent, for that long."""
    due_s, index = last_due_s(records)
    if due_s / speed <= MAX_REPLAY_S:
        return None
    return (f"the replay would run for at least {due_s / speed:g} s at --speed {speed:g}: its request {index + 1} "
            f"of {len(records)} is due {due_s:g} s of trace time after the first, and a replay runs at most "
            f"{MAX_REPLAY_S:,.0f} s (a day); if a time (a 't' or 'gap_s') is in the wrong unit, fix the trace, "
            "else raise --speed or replay the requests before it (--limit)")


def print_report(report: dict, as_json: bool) -> None:
    print(json.dumps(report, separators=(",", ":")) if as_json else format_table(report))


def run_replay(args: argparse.Namespace) -> int:
    """The command. Ctrl+C from here on (reading a large trace takes a while) is reported
    as one during the replay is: with none ended, a zero-count report."""
    planned: list[list[TraceRecord]] = []   # the records to replay, once read
    try:
        started = _start(args, planned)
        if isinstance(started, int):
            return started
        header, records, options = started
    except KeyboardInterrupt:
        num_planned = len(planned[0]) if planned else None   # None: the trace was not read yet
        print("stepahead replay: stopped before the replay started" +
              (f" (0 of {num_planned} requests sent)" if num_planned is not None else " (while reading the trace)"),
              file=sys.stderr)
        print_report(build_report([], 0.0, num_planned=num_planned, interrupted=True), args.json)
        return 130
    return _run(args, header, records, options)


def _start(args: argparse.Namespace,
           planned: list[list[TraceRecord]]) -> int | tuple[TraceHeader, list[TraceRecord], ReplayOptions]:
    """The trace's header and records to replay (put in `planned` too as soon as they are
    known) and the options; or, after one `error:` line, exit status 2."""
    problem = flag_error(args)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    tenant_keys: dict[str, str] = {}
    if args.tenant_keys_file is not None:
        try:
            tenant_keys, warning = tenant_keys_file(args.tenant_keys_file)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if warning is not None:
            print(warning, file=sys.stderr)
    for item in args.tenant_key:   # after the file's: the command line wins
        tenant, sep, key = item.partition("=")
        if not sep or not tenant or not key:   # (never echoed: it may be the key alone)
            print(f"error: --tenant-key expects TENANT=KEY, got an argument of {len(item)} character(s) "
                  f"{'without' if not sep else 'with'} '='", file=sys.stderr)
            return 2
        tenant_keys[tenant] = key
    try:
        header, records = read_trace(args.trace)
    except (OSError, TraceFormatError) as exc:
        print(f"error: cannot read {args.trace}: {exc}", file=sys.stderr)
        return 2
    flag = "--tenant-key" if args.tenant_keys_file is None else "--tenant-key or --tenant-keys-file"
    warning = unknown_tenants_warning(tenant_keys, records, flag)
    if warning is not None:
        print(warning, file=sys.stderr)
    if args.limit is not None:
        records = records[: args.limit]
    planned.append(records)
    if not records:
        print(f"error: {'stdin' if args.trace == STDIN_PATH else args.trace} holds no requests to replay",
              file=sys.stderr)
        return 2
    keyless = sorted({record.tenant for record in records} - tenant_keys.keys()) if args.api_key is None else []
    if keyless:
        print(f"error: --api-key is needed: {len(keyless)} of the trace's tenants "
              f"{'has' if len(keyless) == 1 else 'have'} no --tenant-key or "
              f"--tenant-keys-file key (the first: {keyless[0]!r})", file=sys.stderr)
        return 2
    problem = too_long_problem(records, args.speed)
    if problem is not None:
        print(f"error: {args.trace}: {problem}", file=sys.stderr)
        return 2
    raised = sent_as_one_token(records)
    if raised:
        print(f"stepahead replay: {raised} line(s) of 0 input or output tokens are sent as 1", file=sys.stderr)
    return header, records, ReplayOptions(
        base_url=args.base_url.rstrip("/").removesuffix("/v1"), api_key=args.api_key,
        tenant_keys=tenant_keys, model=args.model, speed=args.speed, concurrency=args.concurrency,
        max_input_tokens=args.max_input_tokens, max_output_tokens=args.max_output_tokens,
        vocab_size=args.vocab_size, progress=not args.no_progress and sys.stderr.isatty(),
        step_hints=not args.no_step_hints, session_suffix=args.session_suffix)


def _run(args: argparse.Namespace, header: TraceHeader, records: list[TraceRecord], options: ReplayOptions) -> int:
    """The replay itself, its report and exit status."""
    try:
        outcome = asyncio.run(replay(records, header, options))
    except GatewayUnreachable as exc:
        print(f"error: cannot reach {options.base_url} (is the gateway up, on that port?): {exc}", file=sys.stderr)
        return 2
    except ModelNotServed as exc:
        model, listed = exc.args
        shown = ", ".join(repr(m) for m in listed[:MAX_MODELS_NAMED]) + (", ..." if len(listed) > MAX_MODELS_NAMED else "")
        print(f"error: the gateway at {options.base_url} does not serve --model {model!r} "
              f"(its /v1/models lists: {shown or 'none'})", file=sys.stderr)
        return 2
    except (aiohttp.ClientError, asyncio.TimeoutError, NoModelListed) as exc:
        tried = len(options.lookup_keys(record.tenant for record in records))
        keys = "the key" if tried <= 1 else f"one of the {tried} keys it was asked with"
        hint = f"is the gateway up, and {keys} right?" + ("" if options.model else " or pass --model")
        print(f"error: cannot list the models of {options.base_url} ({hint}): {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a second Ctrl+C while the first one's aborts ran
        print("stepahead replay: stopped", file=sys.stderr)
        return 130
    if outcome.gateway_stopped is not None:
        answered = sum(1 for r in outcome.results if r.answered and not r.connection_failed)
        print(f"error: the gateway at {options.base_url} stopped answering after {answered} "
              f"request{'' if answered == 1 else 's'} ({outcome.gateway_stopped}); the replay stopped after "
              f"{len(outcome.results)} of {outcome.num_planned} requests (requests in flight were aborted)",
              file=sys.stderr)
    elif outcome.interrupted:
        print(f"stepahead replay: stopped after {len(outcome.results)} of {outcome.num_planned} requests"
              " (requests in flight were aborted)", file=sys.stderr)
    report = build_report(outcome.results, outcome.wall_s,
                          num_planned=outcome.num_planned if outcome.interrupted else None)
    warning = late_send_warning(report)
    if warning is not None:
        print(warning, file=sys.stderr)
    print_report(report, args.json)
    if outcome.gateway_stopped is not None:
        return EXIT_GATEWAY_STOPPED
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
