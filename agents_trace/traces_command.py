"""`stepahead traces list | show | stats | export | delete`: the trace store from a shell, no server needed.

`list` prints the sessions (most recently active first; filters as in `/ui`), `show` one
session's steps (named by its id, or by the request id of one of its steps, a reply's
`x-request-id`; with `--content` its conversation; `--follow` then its new steps as
they arrive, traces_follow.py), `stats` per-tenant figures over a time window (tokens,
cached share, TTFT, tool gaps, forecasts), `export` writes a session (`--session`) or
every session the filters take (`--all`: the recorded traffic, merged in
arrival order, for `stepahead replay`) as `stepahead-trace/1` JSONL, `delete` removes a
session or every session the filters take (asking first, or `--yes`). Each reads the store
directly: `--db PATH`, else the `[tracing]` table of `--config FILE`, else
$STEPAHEAD_TRACE_DB or the user data dir (traces_lookup.py). A session id may also be given
as an answer's `x-session-id` carries it, percent-encoded (`job 100%25`, `caf%C3%A9`), and
so may `--id-contains` (session_id_forms.given_id_forms). A session id may exist in several tenants;
`--tenant` picks one (required only then). `--json` prints one JSON line instead of a
table (text a client sent with its control and bidirectional characters escaped, as in
the tables). Exit codes: 0 done, 1 no such session, no match or no store, 2 bad usage,
config or store, 74 stdout could not be written (a full disk, a closed stdout), 141 the
reader of stdout went away (`| head`), quietly (cache/stdout_reader.py).
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import time
from pathlib import Path

from tqdm import tqdm

from agents_trace.export import ExportCounts, export_lines, export_sessions_lines
from agents_trace.store_delete import StoreBusy, delete_sessions
from agents_trace.store_queries import MAX_PAGE, SessionFilter, find_session_as_given, list_sessions, \
    matching_session_keys
from agents_trace.step_queries import iter_session_steps
from agents_trace.store_stats import StatsWindow, tenant_stats
from agents_trace.time_points import parse_time_point
from agents_trace.traces_follow import AmbiguousSession, follow_session
from agents_trace.traces_lookup import CommandError, session_of_request, store_path, the_session, \
    the_session_or_request
from agents_trace.traces_output import refuse_the_store, write_lines
from agents_trace.traces_view import session_json, session_text, sessions_text, stats_text
from agents_trace.text_table import counted, terminal_json


def _store_args(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--db", help="the trace store (SQLite file)")
    source.add_argument("--config", help="gateway TOML config; its [tracing] store is read")


def _page_size(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_PAGE:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_PAGE}")
    return value


def _offset(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def _filter_args(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--agent", help=f"only {what} with a step this agent ran (any step, not only the first)")
    parser.add_argument("--since", help="active since: a duration back (30m, 2h, 7d) or a local date/time")
    parser.add_argument("--until", help="started by: a duration back or a local date/time, as --since")
    parser.add_argument("--errors", action="store_true", help=f"only {what} with errors")
    parser.add_argument("--id-contains", metavar="TEXT",
                        help=f"only {what} whose id holds TEXT, or with a step whose request id (a reply's "
                        "x-request-id) is TEXT")


def _which_sessions_args(parser: argparse.ArgumentParser, all_help: str) -> None:
    """One session (--session, --tenant) or every session the filters take (--all), and
    the store: what `export` and `delete` act on."""
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--session", help="the session id")
    which.add_argument("--all", action="store_true", help=all_help)
    parser.add_argument("--tenant", help="the tenant (with --session: needed when the id exists in several)")
    _filter_args(parser, "sessions (with --all)")
    _store_args(parser)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("traces", help="agent session traces in the trace store")
    commands = parser.add_subparsers(dest="traces_command", metavar="COMMAND", required=True)

    listing = commands.add_parser("list", help="the sessions, most recently active first")
    listing.add_argument("--tenant", help="only this tenant's sessions")
    _filter_args(listing, "sessions")
    listing.add_argument("--limit", type=_page_size, default=20, help=f"sessions per page (1-{MAX_PAGE}, default 20)")
    listing.add_argument("--offset", type=_offset, default=0, help="skip this many (the next page)")
    listing.add_argument("--json", action="store_true", help="print the page as one JSON line")
    _store_args(listing)
    listing.set_defaults(handler=list_command)

    show = commands.add_parser("show", help="one session's steps, tool gaps, cache hits and forecasts")
    show.add_argument("session", help="the session id (or a reply's x-session-id, percent-encoded), or the "
                      "request id (a reply's x-request-id) of one of its steps")
    show.add_argument("--tenant", help="the tenant (needed when the id exists in several)")
    show.add_argument("--content", action="store_true",
                      help="also print the conversation (when [tracing] capture_content was on)")
    shape = show.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="print the session and its steps as one JSON line")
    shape.add_argument("--follow", "-f", action="store_true",
                       help="then print its new steps as they arrive, until it ends (waits for a session, "
                            "or a request's step, not stored yet; Ctrl+C stops)")
    _store_args(show)
    show.set_defaults(handler=show_command)

    stats = commands.add_parser("stats", help="per tenant: sessions, steps, tokens, cache share, TTFT, forecasts")
    stats.add_argument("--tenant", help="only this tenant")
    stats.add_argument("--agent", help="only this agent's steps")
    stats.add_argument("--since", help="steps that arrived since: a duration back (30m, 2h, 7d) or a local date/time")
    stats.add_argument("--until", help="steps that arrived by: as --since")
    stats.add_argument("--json", action="store_true", help="print one JSON line")
    _store_args(stats)
    stats.set_defaults(handler=stats_command)

    export = commands.add_parser(
        "export", help="write a session, or every session that matches, as stepahead-trace/1 JSONL",
        description="Write one session (--session), or every session the filters take (--all: "
                    "the recorded traffic, merged in arrival order, to replay), as stepahead-trace/1.")
    _which_sessions_args(export, "every session the filters below take, as one trace")
    export.add_argument("--output", "-o", help="output file (default, or -: stdout); a file is written whole or "
                        "not at all, a device or FIFO written into; never the store itself")
    export.set_defaults(handler=export_command)

    delete = commands.add_parser(
        "delete", help="delete a session, or every session that matches, with its steps and content",
        description="Delete one session (--session), or every session the filters take (--all), with "
                    "their steps and captured content. Asks first on a terminal; elsewhere needs --yes.")
    _which_sessions_args(delete, "every session the filters below take")
    delete.add_argument("--yes", action="store_true", help="delete without asking")
    delete.set_defaults(handler=delete_command)


def _run(args: argparse.Namespace, body, *, store_may_be_missing: bool = False) -> int:
    """Run `body(path)`, turning known failures into one stderr line and an exit code (a
    reader of stdout that goes away, `| head`, is a quiet exit: `gateway.cli.main`)."""
    try:
        path = store_path(args, must_exist=not store_may_be_missing)
        try:
            return body(path)
        except sqlite3.DatabaseError as exc:
            raise CommandError(f"cannot read the trace store {path}: {exc}", 2) from None
    except CommandError as exc:
        print(f"stepahead: {exc}", file=sys.stderr)
        return exc.code


def _time_window(args: argparse.Namespace) -> tuple[float | None, float | None]:
    """--since and --until as Unix seconds; CommandError for a time it cannot read."""
    now_s, times = time.time(), {}
    for flag, text in (("--since", args.since), ("--until", args.until)):
        try:
            times[flag] = None if text is None else parse_time_point(text, now_s)   # as the API's ?since=
        except ValueError as exc:
            raise CommandError(f"{flag} {exc}", 2) from None
    return times["--since"], times["--until"]


def _session_filter(args: argparse.Namespace) -> SessionFilter:
    """The sessions the flags select."""
    since_s, until_s = _time_window(args)
    return SessionFilter(tenant=args.tenant, agent=args.agent, since_s=since_s, until_s=until_s,
                         errors_only=args.errors, id_contains=args.id_contains or None)


def stats_command(args: argparse.Namespace) -> int:
    def body(path: Path) -> int:
        since_s, until_s = _time_window(args)
        stats = tenant_stats(path, StatsWindow(tenant=args.tenant, agent=args.agent, since_s=since_s,
                                               until_s=until_s))
        print(json.dumps(stats) if args.json else stats_text(stats))
        return 0
    return _run(args, body)


def list_command(args: argparse.Namespace) -> int:
    def body(path: Path) -> int:
        page = list_sessions(path, _session_filter(args), limit=args.limit, offset=args.offset)
        print(terminal_json(page) if args.json else sessions_text(page))
        return 0
    return _run(args, body)


def _run_on_session(args: argparse.Namespace, body) -> int:
    """`_run` for a command about one session: `body(path, session)`."""
    return _run(args, lambda path: body(path, the_session(path, args.session, args.tenant)))


def show_command(args: argparse.Namespace) -> int:
    if args.follow:
        return _run(args, lambda path: _follow(path, args), store_may_be_missing=True)   # waits for it too

    def body(path: Path) -> int:
        session = the_session_or_request(path, args.session, args.tenant)
        steps = iter_session_steps(path, session["tenant"], session["session"])
        view = session_json if args.json else session_text
        print(view(session, steps, with_content=args.content))
        return 0
    return _run(args, body)


def _follow(path: Path, args: argparse.Namespace) -> int:
    session, tenant = args.session, args.tenant
    if path.exists() and not find_session_as_given(path, session, tenant):   # a request's id, or one to come
        found = session_of_request(path, session, tenant)
        if found is not None:
            session, tenant = found["session"], found["tenant"]
    try:
        return follow_session(path, session, tenant, with_content=args.content)
    except AmbiguousSession as exc:
        raise CommandError(f"session {session!r} exists in several tenants ({exc}); pass --tenant", 2) from None


def export_command(args: argparse.Namespace) -> int:
    if args.all:
        return _run(args, lambda path: _export_matching(path, args))
    if _filters_without_all(args):
        return 2
    return _run_on_session(args, lambda path, session: _export_one(path, session, args.output))


def _say_failed_steps_left_out(counts: ExportCounts) -> None:
    if counts.num_failed_left_out:
        print(f"stepahead: {counts.num_failed_left_out} failed step(s) left out (refused, nothing generated: "
              "the trace format has no field for an error)", file=sys.stderr)


def _filters_without_all(args: argparse.Namespace) -> bool:
    """Whether session filters were given with --session (they select for --all only),
    said on stderr."""
    if args.all or not (args.agent or args.since or args.until or args.errors):
        return False
    print("stepahead: --agent, --since, --until and --errors select sessions for --all; "
          "with --session, name the tenant only", file=sys.stderr)
    return True


def _export_one(path: Path, session: dict, output: str | None) -> int:
    refuse_the_store(output, path)
    counts = ExportCounts()
    write_lines(export_lines(path, session["tenant"], session["session"], counts), output)
    _say_failed_steps_left_out(counts)
    return 0


def _written(counts: ExportCounts) -> str:
    """The sessions an export holds lines of (not one whose every step was refused)."""
    return f"{counted(counts.num_sessions_written, 'session')} of {len(counts.tenants_written)} tenant(s)"


def _export_matching(path: Path, args: argparse.Namespace) -> int:
    refuse_the_store(args.output, path)
    keys = matching_session_keys(path, _session_filter(args))
    if not keys:
        raise CommandError(f"no sessions in {path} match", 1)
    with tqdm(total=len(keys), unit="session", desc="reading", file=sys.stderr, disable=None) as bar:
        counts = ExportCounts()
        lines = export_sessions_lines(path, keys, lambda done: f"stepahead: {_written(done)} from {path.name}",
                                      on_session=lambda: bar.update(1), counts=counts)
        num_lines = write_lines(lines, args.output)
    _say_failed_steps_left_out(counts)
    print(f"stepahead: {counted(num_lines - 1, 'request')} of {_written(counts)}"
          + (f" written to {args.output}" if args.output and args.output != "-" else ""), file=sys.stderr)
    return 0


def delete_command(args: argparse.Namespace) -> int:
    def body(path: Path) -> int:
        if args.all:
            keys = matching_session_keys(path, _session_filter(args))
            if not keys:
                raise CommandError(f"no sessions in {path} match", 1)
        else:
            session = the_session(path, args.session, args.tenant)
            keys = [(session["tenant"], session["session"])]
        what = (f"session {keys[0][1]!r} of tenant {keys[0][0]!r}" if len(keys) == 1 else
                f"{len(keys)} sessions of {len({tenant for tenant, _ in keys})} tenant(s)")
        if not args.yes and not _confirmed(f"delete {what} from {path}, with their steps and content?"):
            raise CommandError("nothing deleted (pass --yes to delete without asking)", 2)
        done = [0, 0]   # whole sessions, steps deleted so far
        try:
            num_steps = delete_sessions(path, keys, after_each=lambda *totals: done.__setitem__(slice(None), totals))
        except (StoreBusy, KeyboardInterrupt) as exc:
            so_far = f"deleted {done[0]} of {counted(len(keys), 'session')} ({counted(done[1], 'step')})"
            if isinstance(exc, KeyboardInterrupt):
                print(f"stepahead: {so_far} before the stop; the rest are whole", file=sys.stderr)
                raise
            raise CommandError(f"the trace store {path} {exc}; {so_far}; try again once it is free", 2) from None
        print(f"stepahead: deleted {what} ({counted(num_steps, 'step')})", file=sys.stderr)
        return 0
    return 2 if _filters_without_all(args) else _run(args, body)


def _confirmed(question: str) -> bool:
    """A "y" typed on a terminal; False without one (a script must say --yes), and for
    Ctrl+D (the end of input: a "no", ending the prompt's line)."""
    if not sys.stdin.isatty():
        return False
    try:
        answer = input(f"stepahead: {question} [y/N] ")
    except EOFError:
        print(file=sys.stderr)
        return False
    return answer.strip().lower() in ("y", "yes")
