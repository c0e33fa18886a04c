"""The generator's own model as a forecast source: the best any online forecaster can do.

The workload generator draws each session's number of user turns from the recorded
sessions' counts, walks a first-order Markov chain over tool symbols (`ToolPatterns`)
until those turns are done, and draws tool durations from a log-normal per tool and think times
from one log-normal. A forecaster that knew those exact distributions — but not the
draws — is the information limit for forecasting that workload: the gap between it and
the oracles that know the future (`OracleForecastSource`) is unforecastable luck, the
gap between it and a learned source is what better learning could still buy.

After a response that calls tool X the session returns (p = 1, ignoring the context cap)
after the response time plus a log-normal(median of X, `tool_sigma`) gap; after a text
answer, the k-th of its session, it returns with P(turns > k | turns >= k) (a text
answer that the chain follows with a tool rather than the user is counted as a turn
too: rare, so the odds are nearly exact), after the response time plus a log-normal
think time. Without turn counts, the chain's odds of END after a text answer. Diagnostics
only (benchmarks/bench_policies.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from agents_trace.workload.generator import WorkloadConfig, tool_median_s
from agents_trace.workload.tool_patterns import END, TEXT_ANSWERS, ToolPatterns
from cache.forecast import Forecast
from cache.forecast_source import RequestSeen
from cache.gap_forecaster import GapForecasterConfig
from cache.gap_stats import LogNormalGap

RESPONSE_S_PER_TOKEN = 0.02  # the generator's response time per output token
QUANTILES = GapForecasterConfig().quantiles


@dataclass(frozen=True, slots=True)
class _Wait:
    """What the generator will draw for a session after its latest request."""

    t_s: float
    delay_s: float
    gap: LogNormalGap
    next_step: str
    p_return: float


class GeneratorModelSource:
    """A `ForecastSource` forecasting each session from the generator's distributions.

    `output_tokens[i]` is the i-th observed request's output length (the generator's
    response time depends on it); requests must be observed in trace order.
    """

    def __init__(self, config: WorkloadConfig, patterns: list[ToolPatterns], output_tokens: list[int]) -> None:
        self._config = config
        self._domains = {f"tenant{index}": patterns[index % len(patterns)] for index in range(config.num_tenants)}
        self._output_tokens = output_tokens
        self._waits: dict[tuple[str, str], _Wait] = {}
        self._answers: dict[tuple[str, str], int] = {}
        self._index = -1

    def observe(self, request: RequestSeen) -> None:
        self._index += 1
        config = self._config
        delay_s = RESPONSE_S_PER_TOKEN * self._output_tokens[self._index]
        if request.tool_calls:
            name = request.tool_calls[0]
            gap = LogNormalGap(math.log(tool_median_s(config, name)), config.tool_sigma)
            wait = _Wait(request.t_s, delay_s, gap, name, 1.0)
        else:
            key = (request.tenant, request.session)
            answers = self._answers[key] = self._answers.get(key, 0) + 1
            gap = LogNormalGap(math.log(config.think_time_median_s), config.think_time_sigma)
            wait = _Wait(request.t_s, delay_s, gap, "USER", p_return_after_answer(self._domains[request.tenant], answers))
        self._waits[(request.tenant, request.session)] = wait

    def forecast(self, tenant: str, session: str, now_s: float) -> Forecast | None:
        wait = self._waits.get((tenant, session))
        if wait is None:
            return None
        p = wait.p_return
        return Forecast(tenant=tenant, session=session, made_at_s=wait.t_s,
                        next_step={wait.next_step: p, END: 1.0 - p}, p_end=1.0 - p,
                        p_return_within=wait.gap.return_points(p, wait.delay_s),
                        eta_quantiles_s=wait.gap.eta_quantiles(QUANTILES, wait.delay_s), confident=True)


def p_return_after_answer(domain: ToolPatterns, answers: int) -> float:
    """P(the session goes on after its `answers`-th text answer) under the generator."""
    if domain.turn_counts:
        at_least = sum(n for turns, n in domain.turn_counts.items() if turns >= answers)
        more = sum(n for turns, n in domain.turn_counts.items() if turns > answers)
        return more / at_least if at_least else 0.0
    counts: dict[str, float] = {}
    for text in TEXT_ANSWERS:
        for symbol, count in domain.transitions.get(text, {}).items():
            counts[symbol] = counts.get(symbol, 0.0) + count
    total = sum(counts.values())
    return 1.0 - (counts.get(END, 0.0) / total if total else 1.0)
