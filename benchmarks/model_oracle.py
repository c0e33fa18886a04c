"""The generator's own model as a forecast source: the best any online forecaster can do.

The workload generator draws each session from a first-order Markov chain over tool
symbols (`ToolPatterns`), tool durations from a log-normal per tool and think times
from one log-normal. A forecaster that knew those exact distributions — but not the
draws — is the information limit for forecasting that workload: the gap between it and
the oracles that know the future (`OracleForecastSource`) is unforecastable luck, the
gap between it and a learned source is what better learning could still buy.

After a response that calls tool X the session returns (p = 1, ignoring the context cap)
after the response time plus a log-normal(median of X, `tool_sigma`) gap; after a text
answer it returns unless the chain's next symbol is END, after the response time plus a
log-normal think time. Diagnostics only (benchmarks/bench_policies.py).
"""
from __future__ import annotations

import math
from statistics import NormalDist

from agents_trace.workload.generator import WorkloadConfig, tool_median_s
from agents_trace.workload.tool_patterns import END, TEXT_ANSWERS, ToolPatterns
from cache.forecast import Forecast
from cache.forecast_source import RequestSeen

_NORMAL = NormalDist()
_Z_POINTS = (-3.0, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)
_QUANTILES = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)
RESPONSE_S_PER_TOKEN = 0.02  # the generator's response time per output token


class GeneratorModelSource:
    """A `ForecastSource` forecasting each session from the generator's distributions.

    `output_tokens[i]` is the i-th observed request's output length (the generator's
    response time depends on it); requests must be observed in trace order.
    """

    def __init__(self, config: WorkloadConfig, patterns: list[ToolPatterns], output_tokens: list[int]) -> None:
        self._config = config
        self._p_end_after_text: dict[str, float] = {}
        for index in range(config.num_tenants):
            domain = patterns[index % len(patterns)]
            counts: dict[str, float] = {}
            for text in TEXT_ANSWERS:
                for symbol, count in domain.transitions.get(text, {}).items():
                    counts[symbol] = counts.get(symbol, 0.0) + count
            total = sum(counts.values())
            self._p_end_after_text[f"tenant{index}"] = counts.get(END, 0.0) / total if total else 1.0
        self._output_tokens = output_tokens
        self._seen: dict[tuple[str, str], tuple[float, float, float, str, float, float]] = {}
        self._index = -1

    def observe(self, request: RequestSeen) -> None:
        self._index += 1
        delay_s = RESPONSE_S_PER_TOKEN * self._output_tokens[self._index]
        if request.tool_calls:
            name = request.tool_calls[0]
            mu = math.log(tool_median_s(self._config, name))
            sigma, p_return = self._config.tool_sigma, 1.0
        else:
            name = "USER"
            mu = math.log(self._config.think_time_median_s)
            sigma, p_return = self._config.think_time_sigma, 1.0 - self._p_end_after_text[request.tenant]
        self._seen[(request.tenant, request.session)] = (request.t_s, delay_s, mu, name, p_return, sigma)

    def forecast(self, tenant: str, session: str, now_s: float) -> Forecast | None:
        seen = self._seen.get((tenant, session))
        if seen is None:
            return None
        t_s, delay_s, mu, name, p_return, sigma = seen
        points = tuple((delay_s + math.exp(mu + sigma * z), p_return * _NORMAL.cdf(z)) for z in _Z_POINTS)
        etas = tuple((q, delay_s + math.exp(mu + sigma * _NORMAL.inv_cdf(q))) for q in _QUANTILES)
        return Forecast(tenant=tenant, session=session, made_at_s=t_s,
                        next_step={name: p_return, END: 1.0 - p_return}, p_end=1.0 - p_return,
                        p_return_within=points, eta_quantiles_s=etas, confident=True)
