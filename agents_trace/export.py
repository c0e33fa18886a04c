"""A stored session as `stepahead-trace/1` JSON Lines (see TRACE_FORMAT.md).

One header line, then one line per step in index order: `t` (seconds since the
session's first request), `tenant`, `session`, `after`, `tool_calls`, `input_tokens`,
`output_tokens`, and `messages` (the request's whole message list) when the store holds
content. No `hash_ids`: the replay harness then derives token content from
(tenant, session, step), as the format allows.
Invariant: a request's `messages` are rebuilt exactly (the first `num_prefix_messages`
of the step it extends, `prefix_step`, then the messages new in it) or left out: never
a shortened list.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from agents_trace.store_queries import iter_session_steps

FORMAT = "stepahead-trace/1"


def _line(value: dict) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n"


def _rebuild(content: dict | None, earlier: dict[int, list]) -> list | None:
    """The request's whole message list, or None when it cannot be rebuilt exactly
    (no content, or the step it extends has none)."""
    if content is None:
        return None
    num_prefix = content["num_prefix_messages"]
    if num_prefix == 0:
        return list(content["new_messages"])
    prefix = earlier.get(content["prefix_step"])
    if prefix is None or len(prefix) < num_prefix:
        return None
    return prefix[:num_prefix] + content["new_messages"]


def export_lines(path: Path, tenant: str, session: str) -> Iterator[str]:
    """The session's JSONL lines (header first); nothing but the header if it is unknown."""
    yield _line({"format": FORMAT, "time_unit": "s",
                 "note": f"stepahead session {session} of tenant {tenant}"})
    full_messages: dict[int, list] = {}
    start_s: float | None = None
    for step, content in iter_session_steps(path, tenant, session):
        if start_s is None:
            start_s = step["arrived_s"]
        after = step["after_label"]
        line = {"t": round(step["arrived_s"] - start_s, 6), "tenant": tenant,
                "session": session, "after": after,
                "tool_calls": [call["name"] for call in step["tool_calls"]],
                "input_tokens": step["num_input_tokens"],
                "output_tokens": step["num_output_tokens"]}
        messages = _rebuild(content, full_messages)
        if messages is not None:
            full_messages[step["index"]] = messages
            line["messages"] = messages
        yield _line(line)
