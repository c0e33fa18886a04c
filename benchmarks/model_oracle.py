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
answer it returns with P(turns > u | the session so far), u the user turns so far, after
the response time plus a log-normal think time. The trace does not say whether a request
that follows a text answer is a user turn or a tool result (the chain follows about one
text answer in twelve with a tool; both arrive after a think time), so u is a posterior:
each such request is a user turn with the chain's odds `q`, and a tool after a text answer
shows that the session had turns left (`_TurnBelief`). Without turn counts, the chain's
odds of END after a text answer. Diagnostics only (benchmarks/bench_policies.py).
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass

if __name__ == "__main__":   # before the imports below, which need the repository on sys.path
    print("error: model_oracle.py is a helper module, not a benchmark: "
          "it is used by bench_policies.py (through policy_sources.py); run one of those", file=sys.stderr)
    sys.exit(2)

from agents_trace.workload.generator import WorkloadConfig, tool_median_s  # noqa: E402
from agents_trace.workload.tool_patterns import END, TEXT_ANSWERS, USER, ToolPatterns  # noqa: E402
from cache.forecast import Forecast  # noqa: E402
from cache.forecast_source import RequestSeen  # noqa: E402
from cache.gap_forecaster import GapForecasterConfig  # noqa: E402
from cache.gap_stats import LogNormalGap  # noqa: E402

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
        self._beliefs: dict[tuple[str, str], _TurnBelief] = {}
        self._index = -1

    def observe(self, request: RequestSeen) -> None:
        self._index += 1
        config = self._config
        delay_s = RESPONSE_S_PER_TOKEN * self._output_tokens[self._index]
        belief = self._belief(request)
        if request.tool_calls:
            name = request.tool_calls[0]
            gap = LogNormalGap(math.log(tool_median_s(config, name)), config.tool_sigma)
            wait = _Wait(request.t_s, delay_s, gap, name, 1.0)
        else:
            gap = LogNormalGap(math.log(config.think_time_median_s), config.think_time_sigma)
            wait = _Wait(request.t_s, delay_s, gap, "USER", belief.p_continue())
        self._waits[(request.tenant, request.session)] = wait

    def _belief(self, request: RequestSeen) -> "_TurnBelief":
        """The session's turn belief, moved on by `request` (a request after a text answer
        is a user turn or a tool result)."""
        key = (request.tenant, request.session)
        belief = self._beliefs.get(key)
        if belief is None:
            belief = self._beliefs[key] = _TurnBelief(self._domains[request.tenant])
        elif request.after in ("user", "USER"):
            belief.continued()
        return belief

    def forecast(self, tenant: str, session: str, now_s: float) -> Forecast | None:
        wait = self._waits.get((tenant, session))
        if wait is None:
            return None
        p = wait.p_return
        return Forecast(tenant=tenant, session=session, made_at_s=wait.t_s,
                        next_step={wait.next_step: p, END: 1.0 - p}, p_end=1.0 - p,
                        p_return_within=wait.gap.return_points(p, wait.delay_s),
                        eta_quantiles_s=wait.gap.eta_quantiles(QUANTILES, wait.delay_s), confident=True)


class _TurnBelief:
    """Posterior over (u, m): u user turns so far, N >= m known, N the session's drawn
    number of user turns; weights are the prior odds of the path that leads there."""

    def __init__(self, domain: ToolPatterns) -> None:
        self._domain = domain
        self._weights: dict[tuple[int, int], float] = {(1, 1): 1.0}
        counts: dict[str, float] = {}
        for text in TEXT_ANSWERS:
            for symbol, count in domain.transitions.get(text, {}).items():
                if symbol != END:
                    counts[symbol] = counts.get(symbol, 0.0) + count
        total = sum(counts.values())
        self._q = counts.get(USER, 0.0) / total if total else 1.0

    def _at_least(self, turns: int) -> float:
        return sum(n for count, n in self._domain.turn_counts.items() if count >= turns)

    def p_continue(self) -> float:
        if not self._domain.turn_counts:
            return p_return_after_answer(self._domain, 0)
        alive = sum(w * self._at_least(m) for (u, m), w in self._weights.items())
        more = sum(w * self._at_least(u + 1) for (u, m), w in self._weights.items())
        return more / alive if alive else 0.0

    def continued(self) -> None:
        """The session went on after a text answer: N > u, and the new request is a user
        turn (u + 1) with odds q or a tool result (u unchanged)."""
        moved: dict[tuple[int, int], float] = {}
        for (u, _m), w in self._weights.items():
            for key, share in (((u + 1, u + 1), self._q), ((u, u + 1), 1.0 - self._q)):
                if share > 0:
                    moved[key] = moved.get(key, 0.0) + w * share
        self._weights = moved


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

