"""A trace's sessions as the predictor's symbol sequences, with the gaps it would see.

Per session: at each request the symbols of what preceded it (`USER` for a session start
or a user turn, else the tool names of `after="tool:a,b"`), with the gap since the
previous request divided by `speed` (the replay harness sends the next step that long
after the previous response ends); `ASSISTANT_TEXT` after a response without tool calls.
Sequences end where the trace's session ends (the predictor appends `END`).

`as_seen_by_gateway=True` gives instead what the gateway's tracer observes when the
replay harness sends the trace as token-id `/v1/completions` (agents_trace/replay): no
messages, so no tool results and no tool calls — every request is `USER` and every
response a text answer (`ASSISTANT_TEXT`), with the same gaps. A predictor that will
observe such a replay must be trained on this stream, not on the tool names it never
sees (else its forecasts condition on states that never occur).
"""
from __future__ import annotations

from collections import defaultdict

from cache.forecast import tool_step
from cache.trace_format import TraceRecord, after_tool_names

USER = "USER"
ASSISTANT_TEXT = "ASSISTANT_TEXT"


def arrival_symbols(after: str | None) -> list[str]:
    return [tool_step(name) for name in after_tool_names(after)] or [USER]


def session_sequences(records: list[TraceRecord], speed: float = 1.0, *,
                      as_seen_by_gateway: bool = False
                      ) -> dict[str, tuple[list[list[str]], list[list[float | None]]]]:
    """tenant -> (symbol sequences, gaps), one entry per session with an id, in order."""
    sessions: dict[tuple[str, str], list[TraceRecord]] = defaultdict(list)
    for record in records:
        if record.session is not None:
            sessions[(record.tenant, record.session)].append(record)
    out: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for (tenant, _), steps in sessions.items():
        symbols: list[str] = []
        gaps: list[float | None] = []
        previous: TraceRecord | None = None
        for record in steps:
            gap = None if previous is None else max(0.0, (record.t - previous.t) / speed)
            arrived = [USER] if as_seen_by_gateway else arrival_symbols(record.after)
            for symbol in arrived:
                symbols.append(symbol)
                gaps.append(gap)
            if as_seen_by_gateway or not record.tool_calls:
                symbols.append(ASSISTANT_TEXT)
                gaps.append(None)
            previous = record
        out[tenant][0].append(symbols)
        out[tenant][1].append(gaps)
    return dict(out)
