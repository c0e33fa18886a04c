"""What the anchor policies know about a waiting session: the tool it asked for, and how
long that tool has taken before.

Continuum (TTL pins) and KVFlow (workflow-aware eviction) do not learn a model of agent
behaviour: Continuum is told that a response ended in a tool call and keeps a history of
each tool's durations; KVFlow is told which agent runs next. `ToolCallSource` gives the
cache exactly that, as `Forecast`s: after a response that asked for tools, the next step
is the first of them for sure (no abandonment odds, no END), returning after that tool's
empirical duration quantiles (from its last `max_samples` waits in this tenant; the
tenant's tools pooled while a tool has fewer than `min_samples`; none before that);
after a text answer, the next step is the user, with no timing. Every forecast says
`confident=True`: there is no model to be cold.

Invariants: a tenant's durations come from its own sessions only; a wait is recorded once,
when the session's next request arrives (`observe`, `observe_step`), measured from the end
of the previous response where that is known (the gateway), else from its arrival (the
simulator).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from cache.forecast import Forecast, tool_step
from cache.forecast_source import RequestSeen

USER_STEP = "USER"
QUANTILES = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)


@dataclass(slots=True)
class _TenantDurations:
    by_tool: dict[str, deque[float]] = field(default_factory=dict)
    pooled: deque[float] = field(default_factory=lambda: deque(maxlen=1024))


class ToolCallSource:
    """A `ForecastSource` from tool calls and per-tool duration history only."""

    def __init__(self, *, min_samples: int = 3, max_samples: int = 256, max_tools: int = 256) -> None:
        """`max_tools` bounds the tools a tenant's durations are kept for by name, whatever
        names its clients send; a later new tool's waits join only the tenant's pool."""
        self.min_samples = min_samples
        self.max_samples = max_samples
        self.max_tools = max_tools
        self._tenants: dict[str, _TenantDurations] = {}
        self._last: dict[tuple[str, str], tuple[float, str | None]] = {}

    def observe(self, request: RequestSeen) -> None:
        self.observe_step(request.tenant, request.session, request.t_s, request.t_s, request.tool_calls)

    def observe_step(self, tenant: str, session: str, arrived_s: float, ended_s: float,
                     tool_calls: tuple[str, ...]) -> None:
        """One served request: the wait since the session's last response (when that asked
        for a tool) is `arrived_s` minus that response's `ended_s`; the simulator, which
        knows only arrivals, passes the arrival time for both."""
        key = (tenant, session)
        last = self._last.get(key)
        if last is not None and last[1] is not None:
            self._record(tenant, last[1], max(0.0, arrived_s - last[0]))
        tool = tool_calls[0] if tool_calls else None
        self._last[key] = (ended_s, tool)

    def forget(self, tenant: str, session: str) -> None:
        """The session ended: its last response is no longer awaited (durations are kept)."""
        self._last.pop((tenant, session), None)

    def forecast(self, tenant: str, session: str, now_s: float) -> Forecast | None:
        last = self._last.get((tenant, session))
        if last is None:
            return None
        tool = last[1]
        if tool is None:
            return Forecast(tenant, session, now_s, next_step={USER_STEP: 1.0}, confident=True)
        quantiles = self.duration_quantiles(tenant, tool)
        elapsed_s = now_s - last[0]
        eta = tuple((q, max(0.0, s - elapsed_s)) for q, s in quantiles)
        return Forecast(tenant, session, now_s, next_step={tool_step(tool): 1.0}, eta_quantiles_s=eta, confident=True)

    def duration_quantiles(self, tenant: str, tool: str) -> tuple[tuple[float, float], ...]:
        """(quantile, seconds) of `tool`'s recorded durations in `tenant` (pooled over the
        tenant's tools while `tool` has too few); empty with no history."""
        durations = self._tenants.get(tenant)
        if durations is None:
            return ()
        samples = durations.by_tool.get(tool)
        if samples is None or len(samples) < self.min_samples:
            samples = durations.pooled
        if len(samples) < self.min_samples:
            return ()
        values = np.quantile(np.fromiter(samples, dtype=np.float64), QUANTILES)
        return tuple(zip(QUANTILES, values.tolist()))

    def _record(self, tenant: str, tool: str, wait_s: float) -> None:
        durations = self._tenants.get(tenant)
        if durations is None:
            durations = self._tenants[tenant] = _TenantDurations()
        samples = durations.by_tool.get(tool)
        if samples is None and len(durations.by_tool) < self.max_tools:
            samples = durations.by_tool[tool] = deque(maxlen=self.max_samples)
        if samples is not None:
            samples.append(wait_s)
        durations.pooled.append(wait_s)
