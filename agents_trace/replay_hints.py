"""What a replayed request declares about its step, for requests that cannot show it.

A token-id replay (`/v1/completions` with a prompt built from `hash_ids`) carries no
messages, and the model's output is not the recorded one, so the gateway sees neither
the tool results a recorded step carried nor the tool calls its response made — the
very symbols the predictor learns from. The replay harness therefore sends the trace's
own record in the request's `stepahead_replay` field (validated by the gateway:
`gateway.schemas.ReplayStep`): `after_tools` and `tool_calls`, tool names.

Invariants: a hint only fills in what the request itself does not show — tool results
found in the messages win over `after_tools`, tool calls parsed from the output win
over `tool_calls`; hinted calls get ids of their own (`replay-<step>-<i>`), which no
client message can answer by accident. Anything malformed reads as no hint.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents_trace.records import After, ToolCall

REPLAY_FIELD = "stepahead_replay"


@dataclass(frozen=True, slots=True)
class ReplayHint:
    after_tools: tuple[str, ...] = ()
    tool_calls: tuple[str, ...] = ()


def replay_hint(body: Mapping[str, Any]) -> ReplayHint:
    """The request body's hint (empty when it has none)."""
    raw = body.get(REPLAY_FIELD)
    if not isinstance(raw, Mapping):
        return ReplayHint()

    def names(key: str) -> tuple[str, ...]:
        value = raw.get(key)
        if not isinstance(value, list):
            return ()
        return tuple(name for name in value if isinstance(name, str) and name)

    return ReplayHint(names("after_tools"), names("tool_calls"))


def hinted_calls(names: tuple[str, ...], step_index: int) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(f"replay-{step_index}-{i}", name) for i, name in enumerate(names))


def hinted_after(after: After, hint: ReplayHint, step_index: int) -> After:
    """`after`, or the hinted tools when the request showed no tool results."""
    if after.kind == "tools" or not hint.after_tools:
        return after
    return After("tools", hinted_calls(hint.after_tools, step_index))
