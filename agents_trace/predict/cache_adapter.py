"""The HMM predictor as a cache forecast source (`cache.forecast_source.ForecastSource`).

`cache/` defines the interface and never imports this package; this adapter turns the
requests the cache simulator (or a worker) serves into the predictor's step stream:

- a request arriving `after="tool:a,tool:b"` means the steps `a`, `b` ran (the first one's
  gap is the time since the session's previous request); `after="user"` (or a session
  seen again with no label, as in Mooncake) is a `USER` step; a new session starts with
  `USER`;
- a response without tool calls is a text answer: the silent `ASSISTANT_TEXT` step is
  observed at once (the predictor looks through it to what follows);
- after each response the session waits (`mark_waiting`, with the tools the response
  asked for), and is forecast.

Sessions never say goodbye in a trace, so one idle for `end_after_s` is ended with
`END` (and learned) the next time the adapter is called, and `on_end(tenant, session)` is
told (the gateway's relay likewise makes its gap forecaster forget a session the tracer
ended: `cache.gap_forecaster.GapForecaster.forget`); with `refit_when_due` its tenant
is then refitted at once when due (a predictor without background refits never learns
otherwise), so a replay from an empty predictor shows a new tenant's cold start.

Invariant: the adapter holds no model state of its own, only each live session's last
arrival (for gaps and idling); O(log n) per request beside the predictor's own work.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable

from cache.forecast import END_SYMBOL, Forecast, tool_step
from cache.forecast_source import RequestSeen
from cache.trace_format import after_tool_names

from .predictor import Predictor
from .vocabulary import ASSISTANT_TEXT_SYMBOL, USER_SYMBOL


def steps_after(after: str | None) -> list[str]:
    """The step symbols a request's `after` field names (empty: none known); its tools
    spelled as steps (`tool_step`), so a tool named `USER` or `END` stays a tool."""
    if after is None or after == "start":
        return []
    if after == "user":
        return [USER_SYMBOL]
    return [tool_step(name) for name in after_tool_names(after)]


class PredictorForecastSource:
    """A `ForecastSource` over an `agents_trace.predict.Predictor`."""

    def __init__(self, predictor: Predictor, *, end_after_s: float = 1800.0,
                 tell_tool_calls: bool = True, refit_when_due: bool = False,
                 on_end: Callable[[str, str], None] | None = None) -> None:
        """tell_tool_calls=False keeps from the predictor which tools a response asked
        for (it then forecasts from the step model alone): a baseline for benchmarks."""
        self.predictor = predictor
        self.end_after_s = end_after_s
        self.tell_tool_calls = tell_tool_calls
        self.refit_when_due = refit_when_due
        self.on_end = on_end
        self._last_s: dict[tuple[str, str], float] = {}
        self._idle: list[tuple[float, str, str]] = []

    def observe(self, request: RequestSeen) -> None:
        self._end_idle(request.t_s)
        key = (request.tenant, request.session)
        last_s = self._last_s.get(key)
        steps = steps_after(request.after)
        if last_s is None:
            steps = [USER_SYMBOL]
            gap_s = None
        else:
            steps = steps or [USER_SYMBOL]
            gap_s = max(0.0, request.t_s - last_s)
        predictor = self.predictor
        for i, symbol in enumerate(steps):
            predictor.observe(request.tenant, request.session, symbol, request.t_s, gap_s if i == 0 else 0.0)
        if not request.tool_calls:
            predictor.observe(request.tenant, request.session, ASSISTANT_TEXT_SYMBOL, request.t_s, None)
        predictor.mark_waiting(request.tenant, request.session, request.t_s,
                               request.tool_calls if self.tell_tool_calls else ())
        self._last_s[key] = request.t_s
        heapq.heappush(self._idle, (request.t_s + self.end_after_s, request.tenant, request.session))

    def forecast(self, tenant: str, session: str, now_s: float) -> Forecast | None:
        self._end_idle(now_s)
        if (tenant, session) not in self._last_s:
            return None
        return self.predictor.forecast(tenant, session, now_s)

    def _end_idle(self, now_s: float) -> None:
        idle = self._idle
        ended: dict[str, None] = {}
        while idle and idle[0][0] <= now_s:
            deadline, tenant, session = heapq.heappop(idle)
            last_s = self._last_s.get((tenant, session))
            if last_s is not None and last_s + self.end_after_s == deadline:
                del self._last_s[(tenant, session)]
                self.predictor.observe(tenant, session, END_SYMBOL, now_s, None)
                if self.on_end is not None:
                    self.on_end(tenant, session)
                ended[tenant] = None
        if self.refit_when_due:
            for tenant in ended:
                self.predictor.refit_if_due(tenant)
