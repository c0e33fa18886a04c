"""Where the cache's forecasts come from: one small interface, several sources.

The simulator (and anything else that drives a `BlockManager` from a request stream)
tells a `ForecastSource` about every request it serves and asks it, right after, for
the waiting session's `Forecast`, which it hands to the manager (`apply`). The built-in
source (`cache.gap_forecaster.GapForecaster`) learns return gaps from arrival times
alone; an adapter outside `cache/` plugs in the HMM predictor of `agents_trace/predict`.
Keeping the interface here is what lets `cache/` stay free of `agents_trace` imports.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from cache.forecast import Forecast


@dataclass(frozen=True, slots=True)
class RequestSeen:
    """One served request, as a forecast source sees it.

    `t_s` is the arrival time; `after` what preceded the request (`"start"`, `"user"`,
    `"tool:NAME"`, or None when the trace does not say); `tool_calls` the tool names the
    response asked for (empty: a text answer, or unknown). `num_blocks` counts the
    prompt's blocks (partial tail included).
    """

    tenant: str
    session: str
    t_s: float
    after: str | None = None
    tool_calls: tuple[str, ...] = ()
    num_blocks: int = 0


class ForecastSource(Protocol):
    """Learns from served requests and forecasts each waiting session.

    `observe` is called once per request, in arrival order, when its response is known;
    `forecast` right after (and possibly later again) for the same session. A source
    with nothing to say returns None (the cache then treats the session as LRU would).
    """

    def observe(self, request: RequestSeen) -> None: ...

    def forecast(self, tenant: str, session: str, now_s: float) -> Forecast | None: ...


def first_confident(primary: Forecast | None, fallback: Callable[[], Forecast | None]) -> Forecast | None:
    """`primary` where it is confident; else the fallback's forecast (asked only then) where
    that one is; else `primary` (None stays None: the cache ranks the session as LRU)."""
    if primary is not None and primary.confident:
        return primary
    other = fallback()
    return other if other is not None and other.confident else primary


class FallbackSource:
    """A `ForecastSource` that forecasts with `primary` where it is confident, else with
    `fallback` where that one is (`first_confident`). Both observe every request, so the
    fallback has learned the same traffic when it is asked; this is how the gateway pairs
    its HMM predictor with the gap forecaster (gateway/forecasting.py), here for the
    simulator."""

    def __init__(self, primary: ForecastSource, fallback: ForecastSource) -> None:
        self.primary = primary
        self.fallback = fallback

    def observe(self, request: RequestSeen) -> None:
        self.primary.observe(request)
        self.fallback.observe(request)

    def forecast(self, tenant: str, session: str, now_s: float) -> Forecast | None:
        return first_confident(self.primary.forecast(tenant, session, now_s),
                               lambda: self.fallback.forecast(tenant, session, now_s))
