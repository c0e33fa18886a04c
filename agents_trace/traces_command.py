"""`stepahead traces export`: one stored session as `stepahead-trace/1` JSONL.

Reads the trace store directly (no server needed): `--db PATH`, else the `[tracing]` table
of `--config FILE`, else $STEPAHEAD_TRACE_DB or the user data dir. A session id may exist
in several tenants; `--tenant` picks one (required only then). Writes to `--output`, or
stdout. Exit codes: 0 written, 1 no such session, 2 bad usage or config.
"""
from __future__ import annotations

import argparse
import sqlite3
import sys
import tomllib
from pathlib import Path

from agents_trace.config import TraceConfig, TraceConfigError, parse_trace_config
from agents_trace.export import export_lines
from agents_trace.store_queries import find_session


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("traces", help="agent session traces in the trace store")
    commands = parser.add_subparsers(dest="traces_command", metavar="COMMAND", required=True)
    export = commands.add_parser("export", help="write a session as stepahead-trace/1 JSONL")
    export.add_argument("--session", required=True, help="the session id")
    export.add_argument("--tenant", help="the tenant (needed when the id exists in several)")
    source = export.add_mutually_exclusive_group()
    source.add_argument("--db", help="the trace store (SQLite file)")
    source.add_argument("--config", help="gateway TOML config; its [tracing] store is read")
    export.add_argument("--output", "-o", help="output file (default: stdout)")
    export.set_defaults(handler=export_session)


def _store_path(args: argparse.Namespace) -> Path:
    if args.db:
        return Path(args.db).expanduser()
    config = TraceConfig()
    if args.config:
        with open(args.config, "rb") as f:
            config = parse_trace_config(tomllib.load(f).get("tracing", {}))
    return config.resolved_store_path()


def export_session(args: argparse.Namespace) -> int:
    try:
        path = _store_path(args)
    except (OSError, tomllib.TOMLDecodeError, TraceConfigError) as exc:
        print(f"stepahead: bad config: {exc}", file=sys.stderr)
        return 2
    if not path.is_file():
        print(f"stepahead: no trace store at {path}", file=sys.stderr)
        return 1
    try:
        matches = find_session(path, args.session, args.tenant)
    except sqlite3.DatabaseError as exc:
        print(f"stepahead: cannot read the trace store {path}: {exc}", file=sys.stderr)
        return 2
    if not matches:
        print(f"stepahead: no session {args.session!r} in {path}", file=sys.stderr)
        return 1
    if len(matches) > 1:
        tenants = ", ".join(m["tenant"] for m in matches)
        print(f"stepahead: session {args.session!r} exists in several tenants ({tenants}); "
              "pass --tenant", file=sys.stderr)
        return 2
    lines = export_lines(path, matches[0]["tenant"], args.session)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as out:
                out.writelines(lines)
        except OSError as exc:
            print(f"stepahead: cannot write {args.output}: {exc}", file=sys.stderr)
            return 2
    else:
        sys.stdout.writelines(lines)
    return 0
