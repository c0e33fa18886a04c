"""`stepahead traces show ID --follow`: a session's new steps as they arrive, as `tail -f`.

For the person watching an agent run: the session as `show` prints it, then each step the
gateway stores afterwards as one line (with its messages, `--content`), until the
session ends (its idle timeout, the gateway stopping), or Ctrl+C. A session deleted while
followed is said so, then waited for: its agent going on stores its next steps under its
id again, and those are printed, each once, after a line saying so. A session
not stored yet is waited for, so the command can start before the agent does (and a store
not made yet: before the gateway's first start). The id is
taken as given, or percent-decoded where no session has it as given (an answer's
`x-session-id` pasted: store_queries.find_session_as_given), or as the request id of one
of its steps (an answer's `x-request-id`), until a session is found; from then on that
session's own id.

Invariants: every step is printed once, in index order; the store is only read, once per
`poll_s` (the writer batches steps every few milliseconds, so a step shows within about a
poll of its reply); the output is the same text `show` prints, line by line.
"""
from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from agents_trace.store_queries import find_request, find_session, find_session_as_given
from agents_trace.step_queries import iter_session_steps
from agents_trace.traces_view import (CONVERSATION_HEADING, session_text, step_conversation, step_line,
                                      state_of)

POLL_S = 1.0


class AmbiguousSession(Exception):
    """The id names sessions of several tenants: the caller asks for `--tenant`."""


def _found(path: Path, session: str, tenant: str | None, *, as_given: bool = False) -> dict | None:
    """The one session with this id (`as_given`: or its percent-decoded one), or None."""
    matches = (find_session_as_given if as_given else find_session)(path, session, tenant)
    if len(matches) > 1:
        raise AmbiguousSession(", ".join(m["tenant"] for m in matches))
    return matches[0] if matches else None


def _found_yet(path: Path, session: str, tenant: str | None, *, store_was_missing: bool) -> dict | None:
    """`_found` (as given) while waiting for the session, else the session of the step
    whose request id this is (a reply's `x-request-id` pasted before its step was stored);
    a store that was missing when the wait began and is only being made now (its file
    there, its tables not yet) has none."""
    try:
        found = _found(path, session, tenant, as_given=True)
        if found is None:
            holding = find_request(path, session, tenant)
            if len(holding) > 1:
                raise AmbiguousSession(", ".join(held["tenant"] for held, _ in holding))
            found = holding[0][0] if holding else None
        return found
    except sqlite3.OperationalError as exc:
        if store_was_missing and "no such table" in str(exc):
            return None
        raise


def _identity(step: dict) -> tuple:
    """What tells a stored step from another: its index, and (another gateway may store a
    step under an index a delete freed between two polls: QA203 F3) its request and arrival."""
    return step["index"], step.get("request_id"), step.get("arrived_s")


def follow_session(path: Path, session: str, tenant: str | None, *, with_content: bool,
                   out: TextIO | None = None, note: TextIO | None = None, poll_s: float = POLL_S,
                   sleep: Callable[[float], None] = time.sleep) -> int:
    """Print the session, then its new steps as they come (to `out`, stdout by default;
    what it waits for to `note`, stderr); 0 once it has ended (a delete is waited out)."""
    out = sys.stdout if out is None else out
    note = sys.stderr if note is None else note
    store_was_missing = not path.exists()
    found = _found_yet(path, session, tenant, store_was_missing=store_was_missing)
    if found is None:
        where = f" and its trace store {str(path)!r}" if store_was_missing else ""
        print(f"stepahead: waiting for session {session!r} (or a request of that id){where} (Ctrl+C stops)",
              file=note, flush=True)
        while found is None:
            sleep(poll_s)
            found = _found_yet(path, session, tenant, store_was_missing=store_was_missing)
    session = found["session"]   # its own id: a decoded one must not find another session later
    steps = list(iter_session_steps(path, found["tenant"], session))
    print(session_text(found, steps, with_content=with_content), file=out, flush=True)
    printed = {_identity(step) for step, _ in steps}   # a set: concurrent steps of a session end out of order
    previous_output = steps[-1][1]["output"] if steps and steps[-1][1] else None
    if found["is_open"]:
        print(f"stepahead: following {session!r}: its new steps as they arrive (Ctrl+C stops)",
              file=note, flush=True)
        if with_content and not steps:
            print(f"\n{CONVERSATION_HEADING}", file=out, flush=True)
    tenant = found["tenant"]
    while found["is_open"]:
        sleep(poll_s)
        found = _found(path, session, tenant)
        if found is None:   # deleted: its agent may go on, stored under its id again (QA200 F3)
            print(f"session {session!r} was deleted", file=out, flush=True)
            print(f"stepahead: waiting for {session!r} to go on under its id (Ctrl+C stops)", file=note, flush=True)
            while found is None:
                sleep(poll_s)
                found = _found(path, session, tenant)
            print(f"session {session!r} goes on", file=out, flush=True)
            printed, previous_output = set(), None   # every step stored now came after the delete
        for step, content in iter_session_steps(path, found["tenant"], session):
            if _identity(step) in printed:
                continue
            print(step_line(step, found["started_s"]), file=out, flush=True)
            if with_content:
                lines, previous_output = step_conversation(step, content, previous_output)
                print("\n".join(lines), file=out, flush=True)
            printed.add(_identity(step))
    print(f"session {session!r} {state_of(found)}", file=out, flush=True)
    return 0
