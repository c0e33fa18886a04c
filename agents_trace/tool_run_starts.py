"""Where a session's tool runs start: the end of the response that asked for the calls a
request answers (`SessionState.asked_ends`), so that an agent-as-tool's sub-agent calls,
made under the session's id while the tool runs, fall inside the run (sessions.py).

Invariant: `asked_ends` holds at most `max_keys` call ids, the latest noted last; each
maps to the end of the response that asked for it (or, answered by a step cut part-way,
the end of that step) and whether that response was a nested step's.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agents_trace.sessions import SessionState


def run_start(state: SessionState, answered: Sequence[str], num_prefix: int) -> tuple[float | None, bool]:
    """(prev_ended_s, is_nested) of a request carrying results for `answered` (trailing
    tool results) that extends `num_prefix` messages of the session's previous request:
    the latest end among the responses that asked for (or since carried) its known calls,
    nested when all are known and nested steps' calls; without results, the session's
    last response end, nested when the head's calls are pending and the request starts
    a conversation of its own (a sub-agent's; a user turn extends the agent's)."""
    if not answered:
        return state.last_ended_s, bool(state.last_asked) and num_prefix == 0
    known = [state.asked_ends[call_id] for call_id in answered if call_id in state.asked_ends]
    if not known:
        return state.last_ended_s, False
    return max(end for end, _ in known), len(known) == len(answered) and all(nested for _, nested in known)


def note_asked_ends(asked_ends: dict[str, tuple[float, bool]], answered: Iterable[str], asked: Mapping[str, str],
                    ended_s: float, is_nested: bool, max_keys: int) -> None:
    """A response ended at `ended_s`: the calls it asked for, and those it answered that
    were known, start their runs there."""
    for call_id in (*(c for c in answered if c in asked_ends), *asked):
        asked_ends.pop(call_id, None)
        asked_ends[call_id] = (ended_s, is_nested)
    while len(asked_ends) > max_keys:
        del asked_ends[next(iter(asked_ends))]
