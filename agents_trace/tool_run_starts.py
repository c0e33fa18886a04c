"""Where a session's tool runs start: the end of the response that asked for the calls a
request answers (`SessionState.asked_ends`), not the session's latest response, so that
calls made under the session's id while a tool runs (an agent used as a tool, the Agents
SDK's `as_tool()`, calls the model as a sub-agent) fall inside the run (sessions.py).

Invariant: `asked_ends` holds at most `max_keys` call ids, the latest noted last; each
maps to the end of the latest response that asked for it, or that carried its result
(a step cut part-way: its retry counts from there, as the session's last end says), and
whether one carried it: a request whose results were all carried already repeats a
step (`repeats_tool_runs`), and no tool ran before it (QA218 F1).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

# call id -> (the end of the latest response that asked for it or carried its result,
# whether a response carried it)
AskedEnds = dict[str, tuple[float, bool]]


def tool_run_start(asked_ends: AskedEnds, answered: Iterable[str], last_ended_s: float | None) -> float | None:
    """Where the tool run of a request answering `answered` (its trailing tool results'
    call ids) started: the latest end among the responses that asked for its known calls;
    the session's last response end (`last_ended_s`) for a request answering none it knows."""
    known = [asked_ends[call_id][0] for call_id in answered if call_id in asked_ends]
    return max(known) if known else last_ended_s


def repeats_tool_runs(asked_ends: AskedEnds, answered: Sequence[str]) -> bool:
    """Whether a request answering `answered` carries only results an earlier response of
    the session carried already (the retry of a step whose stream was cut): their tools
    ran once, before that step, and none ran since."""
    return bool(answered) and all(asked_ends.get(call_id, (0.0, False))[1] for call_id in answered)


def note_asked_ends(asked_ends: AskedEnds, answered: Iterable[str], asked: Iterable[str],
                    ended_s: float, max_keys: int) -> None:
    """A response ended at `ended_s`: the runs of the calls it asked for, and of the known
    ones it answered (carried now), start there."""
    for call_id, is_carried in (*((c, True) for c in answered if c in asked_ends), *((c, False) for c in asked)):
        asked_ends.pop(call_id, None)
        asked_ends[call_id] = (ended_s, is_carried)
    while len(asked_ends) > max_keys:
        del asked_ends[next(iter(asked_ends))]
