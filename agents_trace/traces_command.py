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
from pathlib import Path

from agents_trace.store_queries import MAX_PAGE, find_session_as_given, list_sessions
from agents_trace.step_queries import iter_session_steps
from agents_trace.store_stats import StatsWindow, tenant_stats
from agents_trace.traces_follow import AmbiguousSession, follow_session
from agents_trace.traces_lookup import CommandError, session_of_request, the_session_or_request
from agents_trace.traces_runs import run_command, session_filter, time_window
from agents_trace.traces_session_commands import delete_command, export_command
from agents_trace.traces_view import session_json, session_text, sessions_text, stats_text
from agents_trace.text_table import terminal_json


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
    parser.add_argument("session_id", nargs="?", metavar="SESSION",
                        help="the session id, as `traces show` takes it (or --session)")
    which = parser.add_mutually_exclusive_group()
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
    listing.add_argument("--offset", type=_offset, default=0,
                         help="sessions to skip first: the next page starts at --offset + --limit (default 0)")
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


def stats_command(args: argparse.Namespace) -> int:
    def body(path: Path) -> int:
        since_s, until_s = time_window(args)
        stats = tenant_stats(path, StatsWindow(tenant=args.tenant, agent=args.agent, since_s=since_s,
                                               until_s=until_s))
        print(json.dumps(stats) if args.json else stats_text(stats))
        return 0
    return run_command(args, body)


def list_command(args: argparse.Namespace) -> int:
    def body(path: Path) -> int:
        page = list_sessions(path, session_filter(args), limit=args.limit, offset=args.offset)
        print(terminal_json(page) if args.json else sessions_text(page))
        return 0
    return run_command(args, body)


def show_command(args: argparse.Namespace) -> int:
    if args.follow:
        return run_command(args, lambda path: _follow(path, args), store_may_be_missing=True)   # waits for it too

    def body(path: Path) -> int:
        session = the_session_or_request(path, args.session, args.tenant)
        steps = iter_session_steps(path, session["tenant"], session["session"])
        view = session_json if args.json else session_text
        print(view(session, steps, with_content=args.content))
        return 0
    return run_command(args, body)


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
