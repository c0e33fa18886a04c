"""Steps as the predictor's symbol stream, and checking a forecast against a step.

A session is the symbol sequence of the tool-sequence data sets: `USER`, then the tools
that ran, `ASSISTANT_TEXT` for a text answer, ... and `END`. From Steps:
- at a step's arrival: `USER` when it follows a user turn (or starts the session), else
  the tools whose results it carries, each spelled `cache.forecast.tool_step(name)` (its
  own name, escaped as `tool:NAME` when the name is `USER`, `ASSISTANT_TEXT`, `END` or
  starts with `tool:` or `<`, so no tool reads as a control step); `gap_s` is the wait before it (the
  user's think time, or the tools' duration as the gateway saw it; None when unknown);
- at a step's end, when its response is a text answer: `ASSISTANT_TEXT` (no gap);
- when the session ends: `END`, with the idle time since the last response.
Then the session waits from the step's end on the tools its response asked for
(`mark_waiting`): the predictor forecasts the first of them next, unless abandoned.
A step that failed without generating anything (`generated_nothing`: refused, left
while queued) adds no symbol and leaves the wait as it was: its retry is the step that
follows the tools, so a tool run (or a user turn) is one symbol, its gap counted from
the reply that asked for it. The retry of a step cut part-way (`Step.repeats_tool_runs`)
adds no arrival symbol either: the cut step added its tools.
So the forecast taken right after step k ended predicts step k+1's first symbol, and its
ETA predicts step k+1's `gap_s`.
The control symbols and the tools' spelling are `cache.forecast`'s, which the predictor
(`agents_trace/predict/vocabulary.py`) shares; this module does not depend on the
predictor's internals. A `ForecastCheck` names steps the same way: a user's tool shows
as its own name, or as `tool:NAME` where the name is a control step's.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from cache.forecast import ASSISTANT_TEXT_SYMBOL, END_SYMBOL, USER_SYMBOL, Forecast, tool_step

from agents_trace.records import ForecastCheck, SessionEnded, Step, TraceEvent
from agents_trace.step_outcome import generated_nothing


@dataclass(frozen=True, slots=True)
class SymbolEvent:
    tenant: str
    session: str
    symbol: str
    t_s: float
    gap_s: float | None


def arrival_symbols(step: Step) -> tuple[str, ...]:
    """The symbols the step's arrival adds: its tools' (`tool_step`), or `USER`."""
    if step.after.kind == "tools":
        return tuple(tool_step(name) for name in step.after.tool_names)
    return (USER_SYMBOL,)


def requested_tools(step: Step) -> tuple[str, ...]:
    """The names of the tools the step's response asked for, in order, as the client
    spells them (empty for a text answer or an error); `Observer.mark_waiting` takes
    names."""
    if step.error is not None:
        return ()
    return tuple(call.name for call in step.tool_calls)


def symbol_events(event: TraceEvent, now_s: float) -> list[SymbolEvent]:
    """The symbols a finished step (or a session end) adds, in order."""
    if isinstance(event, SessionEnded):
        last = event.last_ended_s if event.last_ended_s is not None else now_s
        return [SymbolEvent(event.tenant, event.session, END_SYMBOL, now_s,
                            max(0.0, now_s - last))]
    if generated_nothing(event):
        return []
    out = [] if event.repeats_tool_runs else [SymbolEvent(event.tenant, event.session, symbol, event.arrived_s,
                                                          event.gap_s) for symbol in arrival_symbols(event)]
    if event.is_text_answer:
        out.append(SymbolEvent(event.tenant, event.session, ASSISTANT_TEXT_SYMBOL,
                               event.ended_s, None))
    return out


def check_forecast(forecast: Forecast, step: Step) -> ForecastCheck:
    """Compare the forecast made when the previous response ended with `step`.

    The median ETA is told in seconds after the previous response's end, as the step's
    `gap_s` is, whenever that end is known: a forecast's ETA counts from its own
    `made_at_s`, which is a little after that end for the predictor's (the trace writer's
    clock) and at the previous request's arrival for the gap forecaster's; counted from a
    later end, it is the median given no return before that end (`told_eta_s`)."""
    actual = arrival_symbols(step)[0]
    if forecast.next_step:
        predicted, p_predicted = max(forecast.next_step.items(), key=lambda kv: (kv[1], kv[0]))
    else:
        predicted, p_predicted = END_SYMBOL, forecast.p_end
    eta_s = forecast.eta_s(0.5)
    if eta_s is not None and step.prev_ended_s is not None:
        eta_s = told_eta_s(forecast, step.prev_ended_s - forecast.made_at_s)
    return ForecastCheck(predicted=predicted, p_predicted=float(p_predicted), actual=actual,
                         is_hit=predicted == actual, eta_p50_s=eta_s,
                         p_end=float(forecast.p_end), is_confident=forecast.confident)


def told_eta_s(forecast: Forecast, since_s: float) -> float | None:
    """The forecast's median ETA counted from `since_s` seconds after its `made_at_s`.
    When `since_s > 0` (the previous response ended after the forecast was made) the
    session is known not to have returned by then, so this is the median of the rest:
    the quantile F + (1 - F) / 2, F the forecast's return-time CDF at `since_s`
    (interpolated between its quantiles, from 0 at 0 s), less `since_s`; positive, or
    None when the forecast's quantiles end before `since_s` (QA191 N4: a median before
    the previous end was told as 0.0 s)."""
    eta_s = forecast.eta_s(0.5)
    if eta_s is None or since_s <= 0.0:
        return None if eta_s is None else eta_s - since_s
    reached = forecast.eta_quantile_at(since_s)
    if reached is None:
        return None
    rest_s = forecast.eta_s(reached + (1.0 - reached) / 2.0) - since_s
    return rest_s if rest_s > 0.0 else None


class Observer(Protocol):
    def observe(self, tenant: str, session: str, symbol: str, t_s: float,
                gap_s: float | None = None) -> None: ...

    def mark_waiting(self, tenant: str, session: str, t_s: float,
                     tool_calls: tuple[str, ...] = ()) -> None: ...


def predictor_subscriber(predictor: Observer,
                         clock: Callable[[], float]) -> Callable[[TraceEvent], None]:
    """A subscriber that feeds `predictor.observe` with each event's symbols, then marks
    a finished step's session as waiting from its response's end, on the tools that
    response asked for (the wait, and so the forecast's clock, starts there); a step
    that generated nothing changes neither (the session still waits on the calls of the
    reply before it)."""

    def feed(event: TraceEvent) -> None:
        for item in symbol_events(event, clock()):
            predictor.observe(item.tenant, item.session, item.symbol, item.t_s, item.gap_s)
        if isinstance(event, Step) and not generated_nothing(event):
            predictor.mark_waiting(event.tenant, event.session, event.ended_s,
                                   requested_tools(event))

    return feed
