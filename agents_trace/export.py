"""Stored sessions as `stepahead-trace/1` JSON Lines (see TRACE_FORMAT.md).

One session (`export_lines`) or several merged in arrival order (`export_sessions_lines`:
the recorded traffic of a time window, for the replay harness). One header line, then
one line per request: `t` (seconds since the first exported request), `tenant`,
`session`, `after`, `gap_s` where the store knows it (the tool run or user think time
before the step, from the previous line's response end: `line_gap_s`), `tool_calls`, `input_tokens`, `output_tokens`, `service_tier` for a
step served in the flex tier, and, when the store holds content, `messages` (the
request's whole message list) with the request's `tools` and `tool_choice` (extension
fields; each only when the request had it), so a replay over chat sends the prompt the
model read. A completions step never carries `messages` (its prompt was no chat): it is
replayed from its `hash_ids`, or token ids derived as below, with its recorded length.
A step that asked for several choices exports the tool calls of the choice the session
went on from (the one whose call ids the next step answers; before a user turn, a text
answer), else choice 0's, so a line's `tool_calls` agree with the next `after`. `hash_ids` are the prompt's
block fingerprints (`prompt_blocks`; header `block_size`) where the store has them for the
whole prompt (local models, `record_prompt_blocks` on), so a replay or the simulator
shares prefixes as the recorded requests did; without them the replay harness derives
token content from (tenant, session, step), as the format allows.
A step that failed without generating anything (refused: an unknown model, a prompt over
the context, a tenant's limits; or failed before its first token) is left out: the format
has no field for an error, and as an ordinary line a replay would send it as a request that
succeeds. `ExportCounts` says how many were (the CLI says so on stderr). A step that failed
part-way (its reply cut short) is kept, with the tokens it had: that work was done.
Invariant: a request's `messages` are rebuilt exactly (the first `num_prefix_messages`
of the step it extends, `prefix_step`, then the messages new in it) or left out: never
a shortened list.
"""
from __future__ import annotations

import json
import sqlite3
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agents_trace.content import split_tools_entry
from agents_trace.prompt_blocks import RECORD_BLOCK_SIZE, num_blocks
from agents_trace.semconv import OP_TEXT_COMPLETION
from agents_trace.store_queries import ReadCancelled, read_snapshot, read_store
from agents_trace.step_queries import session_steps
from agents_trace.store_rows import GENERATED_NOTHING

FORMAT = "stepahead-trace/1"
LEFT_OUT_HEADER = "x-stepahead-failed-steps-left-out"   # /v1/traces exports: num_left_out, as a number


@dataclass(slots=True)
class ExportCounts:
    """What an export wrote and left out, filled in as its lines are read: a session
    counts as written only when at least one of its steps has a line (one whose every
    step was left out is not in the file)."""

    num_failed_left_out: int = 0   # failed steps that generated nothing (see above)
    num_sessions_written: int = 0  # sessions with at least one line
    tenants_written: set[str] = field(default_factory=set)   # the tenants of those sessions

    def wrote_session(self, tenant: str) -> None:
        self.num_sessions_written += 1
        self.tenants_written.add(tenant)


def is_left_out(step: dict) -> bool:
    """Whether a step is left out of an export: it failed without generating anything."""
    return step["error"] is not None and step["num_output_tokens"] == 0


def num_left_out(path: Path, keys: Iterable[tuple[str, str]], stop: threading.Event | None = None) -> int:
    """How many steps of these (tenant, session)s an export leaves out (`is_left_out`, in
    SQL), counted before any line is written: for a header its reader gets first. A step
    stored after the count (a live session) may make the export's own count differ.
    `stop`: `read_store`'s, also looked at before each session's count (each is short)."""
    total = 0
    with read_store(path, stop) as db:
        for key in keys if db is not None else ():
            if stop is not None and stop.is_set():
                raise ReadCancelled()
            total += db.execute(f"SELECT COUNT(*) FROM steps WHERE tenant = ? AND session = ? AND {GENERATED_NOTHING}",
                                key).fetchone()[0]
    return total


def _line(value: dict) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n"


def _rebuild(content: dict, new_messages: list, earlier: dict[int, list]) -> list | None:
    """The request's whole message list, or None when it cannot be rebuilt exactly
    (the step it extends has no content)."""
    num_prefix = content["num_prefix_messages"]
    if num_prefix == 0:
        return new_messages
    prefix = earlier.get(content["prefix_step"])
    if prefix is None or len(prefix) < num_prefix:
        return None
    return prefix[:num_prefix] + new_messages


def _add_content(line: dict, step: dict, content: dict | None, earlier: dict[int, list]) -> None:
    """`messages`, `tools` and `tool_choice` of a chat step with content into `line`, and
    its whole message list into `earlier` for the steps that extend it."""
    if content is None or step.get("operation") == OP_TEXT_COMPLETION:
        return
    new_messages, tools = split_tools_entry(content["new_messages"])
    messages = _rebuild(content, new_messages, earlier)
    if messages is not None:
        earlier[step["index"]] = messages
        line["messages"] = messages
    if tools is not None:
        if isinstance(tools.get("tools"), list) and all(isinstance(tool, dict) for tool in tools["tools"]):
            line["tools"] = tools["tools"]
        if isinstance(tools.get("tool_choice"), (str, dict)):
            line["tool_choice"] = tools["tool_choice"]


def kept_tool_names(step: dict, following: dict | None) -> list[str]:
    """Tool names of the choice of `step` that the session continued from (see above)."""
    choices = [step["tool_calls"], *(choice["tool_calls"] for choice in step.get("other_choices", ()))]
    kept = choices[0]
    if following is not None and len(choices) > 1:
        answered = {call["call_id"] for call in following["after_tools"]}

        def went_on_from(calls: list[dict]) -> bool:
            return bool(answered & {call["call_id"] for call in calls}) if answered else not calls
        kept = next((calls for calls in choices if went_on_from(calls)), kept)
    return [call["name"] for call in kept]


def line_gap_s(step: dict, previous: dict | None, left_out_between: bool) -> float | None:
    """A line's `gap_s`: the seconds from the end of the session's previous line's
    response to this step's arrival (its tool run or user think time), never negative (a
    step sent before the one ahead of it ended, such as tool results sent as concurrent
    requests, waits for none in a replay); None for a session's first line and where the
    store does not know it (`gap_s` null: no earlier response of the session known). The
    store's `gap_s` counts from the session's last response that ended before the step
    arrived: the step right before, unless steps were left out between (failed) or the
    step came while that one was in flight, or counts from an earlier one (a tool step
    whose run held other steps: sessions.py); then from the previous line's end."""
    if previous is None or step["gap_s"] is None:
        return None
    from_previous_line = (left_out_between or step["arrived_s"] < previous["ended_s"]
                          or (step.get("prev_ended_s") is not None and step["prev_ended_s"] < previous["ended_s"]))
    gap_s = step["arrived_s"] - previous["ended_s"] if from_previous_line else step["gap_s"]
    return max(0.0, gap_s)


def _session_requests(db: sqlite3.Connection | None, tenant: str, session: str,
                      counts: ExportCounts) -> Iterator[tuple[float, dict]]:
    """Each of the session's request lines (all fields but `t`) with its arrival time, read
    on `db` (a reader connection; None: no store, no lines); a step left out
    (`is_left_out`) counted in `counts` instead."""
    if db is None:
        return
    full_messages: dict[int, list] = {}
    pending: tuple[dict, dict] | None = None  # a step's line waits for the next step (its kept choice)
    last_kept: dict | None = None   # the session's last step with a line
    left_out_since = False          # a step was left out after it
    for step, content in session_steps(db, tenant, session):
        if pending is not None:
            yield pending[0]["arrived_s"], {**pending[1], "tool_calls": kept_tool_names(pending[0], step)}
            pending = None
        if is_left_out(step):   # (the step before it is told by it which choice the session went on from)
            counts.num_failed_left_out += 1
            left_out_since = True
            _add_content({}, step, content, full_messages)   # no line, but a kept step may extend its messages
            continue
        line = {"tenant": tenant, "session": session, "after": step["after_label"]}
        gap_s = line_gap_s(step, last_kept, left_out_since)
        if gap_s is not None:
            line["gap_s"] = round(gap_s, 6)
        line.update({"tool_calls": [], "input_tokens": step["num_input_tokens"],
                     "output_tokens": step["num_output_tokens"]})
        last_kept, left_out_since = step, False
        if step.get("service_tier") == "flex":
            line["service_tier"] = "flex"
        blocks = step["prompt_blocks"]
        if blocks is not None and len(blocks) == num_blocks(step["num_input_tokens"]):
            line["hash_ids"] = blocks
        _add_content(line, step, content, full_messages)
        pending = (step, line)
    if pending is not None:
        yield pending[0]["arrived_s"], {**pending[1], "tool_calls": kept_tool_names(pending[0], None)}


def in_chunks(lines: Iterable[str], size: int = 1 << 16) -> Iterator[str]:
    """`lines` joined into pieces of about `size` characters (a line is never split), so a
    server streaming them from a thread pool hops there once a piece, not once a line."""
    pending: list[str] = []
    length = 0
    for line in lines:
        pending.append(line)
        length += len(line)
        if length >= size:
            yield "".join(pending)
            pending, length = [], 0
    if pending:
        yield "".join(pending)


def header_line(note: str) -> str:
    return _line({"format": FORMAT, "block_size": RECORD_BLOCK_SIZE, "time_unit": "s", "note": note})


def _request_line(t_s: float, line: dict) -> str:
    """A request's line; `t` is never negative (a trace's times are, and a wall clock
    stepped back between two steps would make one so)."""
    return _line({"t": round(max(0.0, t_s), 6), **line})


def export_lines(path: Path, tenant: str, session: str, counts: ExportCounts | None = None) -> Iterator[str]:
    """The session's JSONL lines (header first); nothing but the header if it is unknown;
    what was left out in `counts`.
    Lines are in index order with `t` never going back (a trace is in arrival order: a
    step that began a moment before the one indexed ahead of it, or a wall clock stepped
    back, takes the time of the line before it)."""
    yield header_line(f"stepahead session {session} of tenant {tenant}")
    counts = ExportCounts() if counts is None else counts
    start_s: float | None = None
    last_s = 0.0
    with read_store(path) as db:
        for arrived_s, line in _session_requests(db, tenant, session, counts):
            if start_s is None:
                start_s = arrived_s
                counts.wrote_session(tenant)
            last_s = max(last_s, arrived_s - start_s)
            yield _request_line(last_s, line)


def export_sessions_lines(path: Path, keys: Iterable[tuple[str, str]],
                          note: str | Callable[[ExportCounts], str],
                          on_session: Callable[[], None] | None = None,
                          counts: ExportCounts | None = None) -> Iterator[str]:
    """Several sessions as one trace: the header, then every request of every (tenant,
    session) in `keys`, in arrival order (a session's own steps in index order), `t`
    counted from the earliest. The requests are sorted on disk, in a temporary SQLite
    file removed when the lines are done (or abandoned), so memory holds one session at a
    time. Every session is read through one reader connection, in one read transaction
    (`read_snapshot`: the store as it was when the first was read, however long the
    reading takes), ended before the first line is given. `on_session` is called after
    each session is read (for a progress bar); what was written and left out goes in
    `counts`. The header is written once every session was read, so a `note` given as a
    function of the counts can say what the file holds (the sessions with lines, not
    those whose every step was left out)."""
    counts = ExportCounts() if counts is None else counts
    with tempfile.TemporaryDirectory(prefix="stepahead-export-") as scratch:
        # the lines may be read a chunk at a time on any thread (a streamed HTTP answer's
        # thread pool): one reader at a time, never two at once (QA163)
        spool = sqlite3.connect(Path(scratch) / "requests.sqlite3", check_same_thread=False)
        try:
            spool.execute("CREATE TABLE requests (arrived_s REAL NOT NULL, seq INTEGER NOT NULL, "
                          "line TEXT NOT NULL)")
            num_requests = 0
            with read_snapshot(path) as db:
                for tenant, session in keys:
                    rows = [(arrived_s, num_requests + i, json.dumps(line, ensure_ascii=False))
                            for i, (arrived_s, line) in enumerate(_session_requests(db, tenant, session, counts))]
                    spool.executemany("INSERT INTO requests VALUES (?, ?, ?)", rows)
                    num_requests += len(rows)
                    if rows:
                        counts.wrote_session(tenant)
                    if on_session is not None:
                        on_session()
            spool.commit()
            yield header_line(note(counts) if callable(note) else note)
            [(start_s,)] = spool.execute("SELECT MIN(arrived_s) FROM requests").fetchall()
            for arrived_s, text in spool.execute("SELECT arrived_s, line FROM requests ORDER BY arrived_s, seq"):
                yield _request_line(arrived_s - start_s, json.loads(text))
        finally:
            spool.close()
