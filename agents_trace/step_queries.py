"""The trace store's read side for steps: a session's pages of steps, one step's content,
every step with its content (exports), and a step found by its request id.

As store_queries: every function opens its own short read-only connection (but
`session_steps`, on the caller's: an export's one for all its sessions) and takes the
tenant scope explicitly; nothing is cut short silently (pages carry `has_more`). Each step
carries `prefix_from_previous_tokens`, compared with the session's latest successful
prompt to have ended by the step's arrival (`PreviousPrompt`) even where a page starts
mid-session, and `evicted_prefix_tokens`, null where that prompt ended before the step's
gateway started (`gateway_started_s`, not shown: a restart emptied the caches).
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from agents_trace.prompt_blocks import PreviousPrompt
from agents_trace.store_queries import MAX_PAGE, read_store


def _calls(calls: list, has_content: bool) -> list[dict]:
    """A stored `[[call_id, name, arguments], ...]` as dicts; the arguments "" for a step
    whose content was not captured (a store written before they were left out keeps them:
    store_rows' `_call_rows`)."""
    return [{"call_id": c, "name": n, "arguments": a if has_content else ""} for c, n, a in calls]


def _step_dict(row: sqlite3.Row) -> dict:
    out = dict(row)
    out["index"] = out.pop("idx")
    out["is_stream"] = bool(out["is_stream"])
    has_content = out["has_content"] = bool(out["has_content"])
    out["after_tools"] = [{"call_id": c, "name": n} for c, n, _ in json.loads(out["after_tools"])]
    out["tool_calls"] = _calls(json.loads(out["tool_calls"]), has_content)
    out["forecast"] = json.loads(out["forecast"]) if out["forecast"] else None
    out.pop("forecast_hit")
    blocks = out.pop("prompt_blocks", None)   # a store no writer has upgraded yet lacks the column
    out["prompt_blocks"] = json.loads(blocks) if blocks else None
    out.setdefault("service_tier", None)   # ... nor this one
    out["other_choices"] = [  # a store no writer has upgraded yet lacks the column
        {"finish_reason": reason, "tool_calls": _calls(calls, has_content)}
        for reason, calls in json.loads(out.get("other_choices") or "[]")]
    return out


def _add_reuse(step: dict, previous: PreviousPrompt) -> None:
    """The step's `prefix_from_previous_tokens`: the tokens of its prompt that the prompt
    of the session's latest successful step to have ended by its arrival already began
    with (whole fingerprint blocks; `PreviousPrompt`), None when either prompt has no
    fingerprints; and `evicted_prefix_tokens`, those of them the cache no longer served
    (None when that is unknown, the step failed, or that prompt ended before the step's
    gateway started)."""
    step["prefix_from_previous_tokens"], step["evicted_prefix_tokens"] = previous.reuse_in_walk(
        step["prompt_blocks"], step["num_input_tokens"], step["num_cached_tokens"], step["error"] is None,
        index=step["index"], arrived_s=step["arrived_s"], ended_s=step["ended_s"],
        cache_since_s=step.pop("gateway_started_s", None))   # a store no writer has upgraded yet lacks it


def previous_prompt_before(db: sqlite3.Connection, tenant: str, session: str, index: int,
                           arrived_s: float) -> PreviousPrompt:
    """The session's successful prompts before its step `index` (which arrived at
    `arrived_s`) that it or a later step may be compared with: from the latest to have
    ended by `arrived_s` on, so a page or a time window that starts mid-session compares
    its steps as the whole session would. A store no writer has upgraded yet has no
    fingerprints: none."""
    previous = PreviousPrompt()
    where = "tenant = ? AND session = ? AND idx < ? AND error IS NULL AND prompt_blocks IS NOT NULL"
    try:
        rows = db.execute(
            f"SELECT idx, ended_s, prompt_blocks FROM steps WHERE {where} AND idx >= COALESCE(("
            f"SELECT idx FROM steps WHERE {where} AND ended_s <= ? ORDER BY idx DESC LIMIT 1), 0) ORDER BY idx",
            (tenant, session, index, tenant, session, index, arrived_s)).fetchall()
    except sqlite3.OperationalError as error:   # written before fingerprints were kept
        if "no such column" not in str(error):
            raise
        return previous
    for step_index, ended_s, blocks in rows:
        previous.add(step_index, ended_s, json.loads(blocks))
    return previous


def list_steps(path: Path, tenant: str, session: str, *, limit: int = 200,
               offset: int = 0) -> dict:
    """A page of a session's steps in index order, without message content (nor the
    prompt fingerprints: the page carries `prefix_from_previous_tokens` instead)."""
    limit, offset = max(1, min(limit, MAX_PAGE)), max(0, offset)
    with read_store(path) as db:
        rows = [] if db is None else db.execute(
            "SELECT * FROM steps WHERE tenant = ? AND session = ? ORDER BY idx LIMIT ? OFFSET ?",
            (tenant, session, limit + 1, offset)).fetchall()
        previous = (previous_prompt_before(db, tenant, session, rows[0]["idx"], rows[0]["arrived_s"])
                    if db is not None and rows and offset > 0 else PreviousPrompt())
    steps = [_step_dict(r) for r in rows[:limit]]
    for step in steps:
        _add_reuse(step, previous)
        del step["prompt_blocks"]   # for exports; a page for the viewer stays small
    return {"data": steps, "has_more": len(rows) > limit, "offset": offset, "limit": limit}


def has_step(path: Path, tenant: str, session: str, index: int) -> bool:
    """Whether the session has a step `index` (with or without captured content)."""
    with read_store(path) as db:
        return db is not None and db.execute(
            "SELECT 1 FROM steps WHERE tenant = ? AND session = ? AND idx = ?", (tenant, session, index)).fetchone() \
            is not None


def step_content(path: Path, tenant: str, session: str, index: int) -> dict | None:
    """One step's captured content: the messages new in its request, its output and, when
    it asked for several choices, the outputs of choices 1.. (`other_outputs`)."""
    with read_store(path) as db:
        row = None if db is None else db.execute(
            "SELECT * FROM step_content WHERE tenant = ? AND session = ? AND idx = ?",
            (tenant, session, index)).fetchone()
    if row is None:
        return None
    return {"index": index, "num_prefix_messages": row["num_prefix_messages"],
            "prefix_step": row["prefix_step"], "new_messages": json.loads(row["new_messages"]),
            "output": json.loads(row["output"]) if row["output"] else None,
            "other_outputs": json.loads(row["other_outputs"]) if "other_outputs" in row.keys() else []}


def iter_session_steps(path: Path, tenant: str, session: str) -> Iterator[tuple[dict, dict | None]]:
    """Every step with its content (None when not captured), in index order."""
    with read_store(path) as db:
        if db is not None:
            yield from session_steps(db, tenant, session)


def session_steps(db: sqlite3.Connection, tenant: str, session: str) -> Iterator[tuple[dict, dict | None]]:
    """`iter_session_steps` on a reader connection the caller holds (`read_store`), so an
    export of many sessions opens one, not one a session."""
    previous = PreviousPrompt()
    cursor = db.execute(
        "SELECT s.*, c.num_prefix_messages AS c_prefix, c.prefix_step AS c_prefix_step, "
        "c.new_messages AS c_new, c.output AS c_output FROM steps s LEFT JOIN step_content c "
        "ON c.tenant = s.tenant AND c.session = s.session AND c.idx = s.idx "
        "WHERE s.tenant = ? AND s.session = ? ORDER BY s.idx", (tenant, session))
    for row in cursor:
        raw = dict(row)
        content = None
        if raw["c_new"] is not None:
            content = {"num_prefix_messages": raw["c_prefix"],
                       "prefix_step": raw["c_prefix_step"],
                       "new_messages": json.loads(raw["c_new"]),
                       "output": json.loads(raw["c_output"]) if raw["c_output"] else None}
        for key in ("c_prefix", "c_prefix_step", "c_new", "c_output"):
            del raw[key]
        step = _step_dict(raw)
        _add_reuse(step, previous)
        yield step, content


def request_step(path: Path, tenant: str, session: str, request_id: str) -> dict | None:
    """The session's step with this request id (a reply's `x-request-id`): its `index`
    and `offset`, how many of the session's steps come before it (the two differ where a
    failing store lost a step); None when it has none. Two index look-ups, as fast at step
    10,000 as at 1 (`+`: by response_id, not by reading every step of the session)."""
    sql = ("SELECT named.idx, (SELECT COUNT(*) FROM steps AS earlier WHERE earlier.tenant = named.tenant "
           "AND earlier.session = named.session AND earlier.idx < named.idx) FROM steps AS named "
           "WHERE named.response_id = ? AND +named.tenant = ? AND +named.session = ? ORDER BY named.idx LIMIT 1")
    with read_store(path) as db:
        row = None if db is None else db.execute(sql, (request_id, tenant, session)).fetchone()
    return None if row is None else {"index": row[0], "offset": row[1]}
