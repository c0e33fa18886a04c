"""benchmarks/bench_e2e.py's forecasting counters: what the relay did, the gap forecaster's
share included, read from a gateway app's state."""
from __future__ import annotations

from types import SimpleNamespace

from agents_trace.predict.predictor import Predictor
from agents_trace.records import After, Step
from benchmarks.bench_e2e import forecast_counters
from gateway.forecasting import ForecastRelay


def _app(relay):
    return SimpleNamespace(state=SimpleNamespace(gateway=SimpleNamespace(forecasts=relay)))


def test_forecast_counters_report_the_relays_work():
    assert forecast_counters(_app(None)) == {}
    with Predictor() as predictor:
        relay = ForecastRelay(predictor, {}, clock=lambda: 2.0)
        relay(Step(tenant="t", session="s", index=0, session_source="header", operation="chat", model="m",
                   agent=None, arrived_s=1.0, ended_s=2.0, after=After("start"), gap_s=None, prev_ended_s=None,
                   num_messages=1, is_stream=False, num_input_tokens=40, num_cached_tokens=0,
                   num_output_tokens=2, ttft_s=0.1, worker=None, finish_reason="stop", tool_calls=()))
        counters = forecast_counters(_app(relay))
    assert counters == {"forecasts_forwarded": 0, "forecasts_made": 1, "gap_forecasts_sent": 0, "refits_done": 0}
