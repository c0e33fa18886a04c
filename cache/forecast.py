"""The forecast that crosses from the predictor to the cache.

`Forecast` lives in `cache/` so the cache never imports the predictor: the predictor
produces these records, the cache policy only reads them. A Forecast is immutable and
says, for one waiting session of one tenant, what is likely to happen next and when.

Step names (the keys of `next_step`) form one namespace with two kinds of names: the
control steps `USER` (the user speaks), `ASSISTANT_TEXT` (a text answer) and `END`
(the session ends), and tools. A tool is named by `tool_step(name)`: its own name,
unless that name is a control step's or starts with `tool:` or `<` (reserved for the
escape and for buckets such as the predictor's `<oov>`), when it is `tool:` + name. So
no tool ever reads as a control step, ordinary names (OpenAI's `[a-zA-Z0-9_-]`) keep
their spelling, and the mapping is one-to-one. The tracer's `after` kinds (`start`,
`user`, `tools`) are another namespace and never appear here.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Mapping, NewType

TenantId = NewType("TenantId", str)
SessionId = NewType("SessionId", str)

END_SYMBOL = "END"
USER_SYMBOL = "USER"
ASSISTANT_TEXT_SYMBOL = "ASSISTANT_TEXT"
CONTROL_STEPS = frozenset({USER_SYMBOL, ASSISTANT_TEXT_SYMBOL, END_SYMBOL})
TOOL_ESCAPE = "tool:"
RESERVED_PREFIXES = (TOOL_ESCAPE, "<")


def tool_step(name: str) -> str:
    """The step name of the tool called `name`: `name` itself, or `tool:` + `name` when
    `name` is a control step's or starts with a reserved prefix (one-to-one)."""
    if name in CONTROL_STEPS or name.startswith(RESERVED_PREFIXES):
        return TOOL_ESCAPE + name
    return name


def is_tool_step(step: str) -> bool:
    """Whether a step name (a `next_step` key) is a tool's: every name but the control
    steps' (a bucket like `<oov>` stands for tools)."""
    return step not in CONTROL_STEPS


@dataclass(frozen=True, slots=True)
class Forecast:
    """What one session is expected to do next.

    Invariants: probabilities lie in [0, 1]; `p_return_within` is sorted by horizon and
    non-decreasing in probability; `eta_quantiles_s` is sorted by quantile and
    non-decreasing in seconds; `next_step` sums to 1 (it includes `END`).
    `confident` is False when the tenant's model is cold or recently inaccurate; the
    cache then treats the tenant as plain LRU.
    """

    tenant: str
    session: str
    made_at_s: float
    next_step: Mapping[str, float] = field(default_factory=dict)
    p_end: float = 0.0
    p_return_within: tuple[tuple[float, float], ...] = ()
    eta_quantiles_s: tuple[tuple[float, float], ...] = ()
    confident: bool = False

    def waits_on_tool(self) -> bool:
        """Whether the session most likely waits on a tool call (not a user, not the end):
        the tool steps (`is_tool_step`) of `next_step` hold at least half of it."""
        return sum(p for step, p in self.next_step.items() if is_tool_step(step)) >= 0.5

    def p_return(self, horizon_s: float) -> float:
        """P(the session sends another request within `horizon_s` of `made_at_s`).

        Linear interpolation between the stored horizons; 0 before the first, the last
        value past the last (never more than 1 - p_end).
        """
        points = self.p_return_within
        if not points:
            return 1.0 - self.p_end
        horizons = [h for h, _ in points]
        i = bisect.bisect_left(horizons, horizon_s)
        if i < len(points) and points[i][0] == horizon_s:
            return points[i][1]
        if i == 0:
            h1, p1 = points[0]
            return p1 * max(0.0, horizon_s) / h1 if h1 > 0 else p1
        if i >= len(points):
            return points[-1][1]
        (h0, p0), (h1, p1) = points[i - 1], points[i]
        return p0 + (p1 - p0) * (horizon_s - h0) / (h1 - h0)

    def eta_quantile_at(self, elapsed_s: float) -> float | None:
        """`eta_s`'s inverse: the quantile of the return time (given a return) reached
        `elapsed_s` after `made_at_s`, interpolated between the stored quantiles (from 0 at
        0 s); None when no quantiles are known or `elapsed_s` is at or past the last one."""
        q_before, s_before = 0.0, 0.0
        for q, s in self.eta_quantiles_s:
            if elapsed_s < s:
                return q_before + (q - q_before) * (elapsed_s - s_before) / (s - s_before)
            q_before, s_before = q, s
        return None

    def eta_s(self, quantile: float) -> float | None:
        """Seconds after `made_at_s` by which the session returns with prob. `quantile`
        (given that it returns), interpolated; None when no quantiles are known."""
        points = self.eta_quantiles_s
        if not points:
            return None
        qs = [q for q, _ in points]
        i = bisect.bisect_left(qs, quantile)
        if i < len(points) and points[i][0] == quantile:
            return points[i][1]
        if i == 0:
            return points[0][1]
        if i >= len(points):
            return points[-1][1]
        (q0, s0), (q1, s1) = points[i - 1], points[i]
        return s0 + (s1 - s0) * (quantile - q0) / (q1 - q0)
