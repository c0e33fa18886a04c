"""Where a `stepahead traces` command finds what it is about: the store (`--db`, the
config's `[tracing]`, $STEPAHEAD_TRACE_DB or the user data dir) and the one session an id
names (a session id as given, or percent-decoded as an answer's `x-session-id` carries it,
or the request id of one of its steps). Each failure is a
`CommandError`: a line for stderr and the exit code (1 nothing found, 2 bad usage or config).
"""
from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

from agents_trace.config import TraceConfig, TraceConfigError, parse_trace_config
from agents_trace.store_queries import find_request, find_session_as_given


UTF8_BOM = b"\xef\xbb\xbf"   # as gateway/config.py skips it


class CommandError(Exception):
    """A message for stderr and the exit code to return."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def store_path(args: argparse.Namespace, *, must_exist: bool = True) -> Path:
    """The store to read; CommandError when the config is bad, when the path names
    something other than a file, or when the file is missing and `must_exist` (`show
    --follow` waits for a store not made yet)."""
    try:
        if args.db:
            path = Path(args.db).expanduser()
        else:
            config = TraceConfig()
            if args.config:
                config = parse_trace_config(_tracing_table(args.config))
            path = config.resolved_store_path()
    except (OSError, TraceConfigError) as exc:
        raise CommandError(f"bad config: {exc}", 2) from None
    if path.is_dir():   # not "no store": a wrong path, as a bad config is
        raise CommandError(f"{path} is a directory, not a trace store (give the store's file)", 2)
    if not path.is_file() and (must_exist or path.exists()):
        raise CommandError(f"no trace store at {path}", 1)
    return path


def _tracing_table(config_file: str) -> dict:
    """The `[tracing]` table of a config file (empty when it has none); TraceConfigError
    when the file is not UTF-8 TOML or `tracing` is not one table, in the words
    `stepahead serve` uses for the same file (which skips a UTF-8 BOM first too)."""
    with open(config_file, "rb") as f:
        raw = f.read()
    body = raw.removeprefix(UTF8_BOM)
    try:
        data = tomllib.loads(body.decode())
    except tomllib.TOMLDecodeError as exc:
        raise TraceConfigError(f"{config_file}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceConfigError(f"{config_file}: not UTF-8 text ({exc.reason} at byte "
                               f"{exc.start + len(raw) - len(body)})") from None
    table = data.get("tracing", {})
    if not isinstance(table, dict):
        raise TraceConfigError(f"tracing must be a table, not {table!r}")
    return table


def the_session(path: Path, session: str, tenant: str | None) -> dict:
    """The one stored session with this id (within `tenant`; or, when none has it, with
    the id percent-decoded: `find_session_as_given`), or CommandError."""
    matches = find_session_as_given(path, session, tenant)
    if not matches:
        where = f" in tenant {tenant!r}" if tenant else ""
        raise CommandError(f"no session {session!r}{where} in {path}", 1)
    if len(matches) > 1:
        tenants = ", ".join(m["tenant"] for m in matches)
        raise CommandError(f"session {session!r} exists in several tenants ({tenants}); pass --tenant", 2)
    return matches[0]


def the_session_or_request(path: Path, session_or_request: str, tenant: str | None) -> dict:
    """`the_session`, or when no session has this id, the one holding the step whose
    request id it is (`session_of_request`)."""
    if not find_session_as_given(path, session_or_request, tenant):
        found = session_of_request(path, session_or_request, tenant)
        if found is not None:
            return found
    return the_session(path, session_or_request, tenant)   # the session, or why none


def session_of_request(path: Path, request_id: str, tenant: str | None) -> dict | None:
    """The one session holding the step whose request id (a reply's `x-request-id`) this
    is, said on stderr with the step; None when no step has it; CommandError when steps of
    several tenants do."""
    found = find_request(path, request_id, tenant)
    if len(found) > 1:
        tenants = ", ".join(session["tenant"] for session, _ in found)
        raise CommandError(f"request {request_id!r} exists in several tenants ({tenants}); pass --tenant", 2)
    if not found:
        return None
    session, index = found[0]
    print(f"stepahead: request {request_id!r} is step #{index} of session {session['session']!r}"
          f" (tenant {session['tenant']!r})", file=sys.stderr)
    return session
