"""What every `stepahead traces` command runs through: the store it reads (traces_lookup.py),
its known failures turned into one stderr line and an exit code, and the session filters
and time window its flags select."""
from __future__ import annotations

import argparse
import sqlite3
import sys
import time

from agents_trace.store_queries import SessionFilter
from agents_trace.time_points import parse_time_point
from agents_trace.traces_lookup import CommandError, store_path, the_session


def run_command(args: argparse.Namespace, body, *, store_may_be_missing: bool = False) -> int:
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


def time_window(args: argparse.Namespace) -> tuple[float | None, float | None]:
    """--since and --until as Unix seconds; CommandError for a time it cannot read."""
    now_s, times = time.time(), {}
    for flag, text in (("--since", args.since), ("--until", args.until)):
        try:
            times[flag] = None if text is None else parse_time_point(text, now_s)   # as the API's ?since=
        except ValueError as exc:
            raise CommandError(f"{flag} {exc}", 2) from None
    return times["--since"], times["--until"]


def session_filter(args: argparse.Namespace) -> SessionFilter:
    """The sessions the flags select."""
    since_s, until_s = time_window(args)
    return SessionFilter(tenant=args.tenant, agent=args.agent, since_s=since_s, until_s=until_s,
                         errors_only=args.errors, id_contains=args.id_contains or None)


def run_on_session(args: argparse.Namespace, body) -> int:
    """`run_command` for a command about one session: `body(path, session)`."""
    return run_command(args, lambda path: body(path, the_session(path, args.session, args.tenant)))
