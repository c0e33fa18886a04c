"""A stored session as `stepahead-trace/1` JSON Lines (see TRACE_FORMAT.md).

One header line, then one line per step in index order: `t` (seconds since the
session's first request), `tenant`, `session`, `after`, `tool_calls`, `input_tokens`,
`output_tokens`, and `messages` (the request's whole message list) when the store holds
content. A step that asked for several choices exports the tool calls of the choice the
session went on from (the one whose call ids the next step answers; before a user turn,
a text answer), else choice 0's, so a line's `tool_calls` agree with the next `after`. No `hash_ids`: the replay harness then derives token content from
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


def export_lines(path: Path, tenant: str, session: str) -> Iterator[str]:
    """The session's JSONL lines (header first); nothing but the header if it is unknown."""
    yield _line({"format": FORMAT, "time_unit": "s",
                 "note": f"stepahead session {session} of tenant {tenant}"})
    full_messages: dict[int, list] = {}
    start_s: float | None = None
    pending: tuple[dict, dict] | None = None  # a step's line waits for the next step (its kept choice)
    for step, content in iter_session_steps(path, tenant, session):
        if pending is not None:
            yield _line({**pending[1], "tool_calls": kept_tool_names(pending[0], step)})
        if start_s is None:
            start_s = step["arrived_s"]
        line = {"t": round(step["arrived_s"] - start_s, 6), "tenant": tenant,
                "session": session, "after": step["after_label"], "tool_calls": [],
                "input_tokens": step["num_input_tokens"],
                "output_tokens": step["num_output_tokens"]}
        messages = _rebuild(content, full_messages)
        if messages is not None:
            full_messages[step["index"]] = messages
            line["messages"] = messages
        pending = (step, line)
    if pending is not None:
        yield _line({**pending[1], "tool_calls": kept_tool_names(pending[0], None)})
