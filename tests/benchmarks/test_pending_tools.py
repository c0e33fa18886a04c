from __future__ import annotations

import math

import pytest

from benchmarks.pending_tools import forecast_quality
from cache.forecast import Forecast
from cache.sim.requests import SimRequest


class _FixedSource:
    """Every forecast: median ETA 5 s; P(return within 5 / 15 / 45 s) = 0.5 / 0.8 / 0.9."""

    def __init__(self) -> None:
        self.seen = []

    def observe(self, request) -> None:
        self.seen.append(request)

    def forecast(self, tenant, session, now_s):
        return Forecast(tenant, session, now_s, p_return_within=((5.0, 0.5), (15.0, 0.8), (45.0, 0.9)),
                        eta_quantiles_s=((0.5, 5.0),))


def request(t_s: float, session: str, tool_calls: tuple[str, ...]) -> SimRequest:
    return SimRequest(t_s, "t", session, None, tool_calls, 10, 5, 1, [])


def test_forecast_quality_scores_each_wait_against_the_next_arrival():
    source = _FixedSource()
    out = forecast_quality([request(0.0, "a", ("ls",)), request(1.0, "b", ()),
                            request(10.0, "a", ()), request(21.0, "b", ()), request(30.0, "a", ())],
                           source)
    assert len(source.seen) == 5
    # a waited 10 s after a tool call; after text answers, b waited 20 s and a 20 s.
    assert (out["tool_waits"], out["text_waits"]) == (1, 2)
    assert out["tool_eta_log_error"] == pytest.approx(round(math.log(2.0), 3))
    assert out["text_eta_log_error"] == pytest.approx(round(math.log(4.0), 3))
    assert out["tool_p_within_5s"] == 0.5 and out["tool_returned_within_5s"] == 0.0
    assert out["tool_p_within_15s"] == 0.8 and out["tool_returned_within_15s"] == 1.0
    assert out["text_returned_within_15s"] == 0.0 and out["text_returned_within_45s"] == 1.0
