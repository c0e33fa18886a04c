"""The future, for the offline Belady oracle: when each block is next used.

Invariant: `next_uses[i][j]` is the index of the first request after request `i` whose
full blocks contain `requests[i].hashes[j]` (hashes are tenant-scoped already), or
`math.inf` when no later request uses it. Indices, not arrival times: traces quantise
time (Mooncake to 3 s), and the oracle needs the exact order of the next uses.
One backward pass, O(total blocks).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from cache.forecast import Forecast
from cache.hashing import BlockHash
from cache.sim.requests import SimRequest

_TOOL_OR_USER = {"USER": 1.0}


def next_uses(requests: Sequence[SimRequest]) -> list[list[float]]:
    later: dict[BlockHash, float] = {}
    result: list[list[float]] = [[] for _ in requests]
    for i in range(len(requests) - 1, -1, -1):
        request = requests[i]
        get = later.get
        result[i] = [get(block_hash, math.inf) for block_hash in request.hashes]
        for block_hash in request.hashes:
            later[block_hash] = float(i)
    return result


class OracleForecastSource:
    """A `ForecastSource` that knows each session's next arrival (diagnostics only).

    `mode="exact"`: P(return) is 1 at exactly the next arrival (0 when none comes);
    `mode="who"`: whether the session returns is known, the timing is `learner`'s.
    It bounds what better forecasts could buy: the gap between it and a learned source
    is forecast quality, the gap between it and Belady is the policy's.
    The requests must be replayed in order and observed once each.
    """

    def __init__(self, requests: Sequence[SimRequest], sessions: Sequence[str], mode: str, learner) -> None:
        if mode not in ("exact", "who"):
            raise ValueError("mode must be 'exact' or 'who'")
        self._mode = mode
        self._learner = learner
        self._next_s: list[float | None] = [None] * len(requests)
        later: dict[str, float] = {}
        for i in range(len(requests) - 1, -1, -1):
            self._next_s[i] = later.get(sessions[i])
            later[sessions[i]] = requests[i].t_s
        self._index = -1

    def observe(self, request) -> None:
        self._index += 1
        self._learner.observe(request)

    def forecast(self, tenant: str, session: str, now_s: float) -> Forecast | None:
        next_s = self._next_s[self._index]
        if self._mode == "exact":
            if next_s is None:
                return Forecast(tenant, session, now_s, p_end=1.0, confident=True)
            gap_s = max(next_s - now_s, 1e-3)
            return Forecast(tenant, session, now_s, next_step=dict(_TOOL_OR_USER), p_end=0.0,
                            p_return_within=((gap_s * 0.99, 0.0), (gap_s, 1.0)), confident=True)
        learned = self._learner.forecast(tenant, session, now_s)
        if learned is None:
            return None
        p_ever = 1.0 - learned.p_end
        p = 0.0 if next_s is None else 1.0
        scale = p / p_ever if p_ever > 0 else 0.0
        return dataclasses.replace(
            learned, p_end=1.0 - p, confident=True,
            p_return_within=tuple((h, min(p, q * scale)) for h, q in learned.p_return_within))
