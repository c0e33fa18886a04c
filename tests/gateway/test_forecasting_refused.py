"""Refused requests teach the forecasts nothing and send the workers nothing (QA124: every
refused first request was learned as a one-step finished session, refitting the tenant's
model without end and teaching it that sessions end at once)."""
from __future__ import annotations

import dataclasses

from agents_trace.predict.predictor import Predictor
from agents_trace.predict.config import PredictorConfig
from agents_trace.records import SessionEnded
from gateway.forecasting import ForecastRelay

from tests.gateway.test_forecasting import RecordingEngine, feed_two_answer_sessions, make_step


def test_a_refused_first_request_is_no_session_learned_and_no_forecast_sent():
    with Predictor(PredictorConfig(background_refits=False)) as predictor:
        engine = RecordingEngine("predictive")
        relay = ForecastRelay(predictor, {"m": engine})
        feed_two_answer_sessions(relay, range(2))
        relay(SessionEnded("t", "u0", 2, 16.0, "idle"))
        learned = predictor.status("t")
        num_sent = len(engine.forecasts)
        for i in range(50):   # as the tracer records each: its one step refused, its session ended "failed"
            relay(dataclasses.replace(make_step(f"refused{i}", 0, 100.0 + i, 100.0 + i), error="rate_limit_exceeded",
                                      num_output_tokens=0, ttft_s=None, finish_reason=None))
            relay(SessionEnded("t", f"refused{i}", 1, None, "failed"))
        after = predictor.status("t")
        assert after.num_learned == learned.num_learned == 1
        assert (after.recent_top1, after.num_live_sessions) == (learned.recent_top1, learned.num_live_sessions)
        assert len(engine.forecasts) == num_sent


def test_an_end_for_a_session_never_seen_is_neither_scored_nor_learned():
    with Predictor(PredictorConfig(background_refits=False)) as predictor:
        predictor.observe("t", "s", "USER", 0.0)
        predictor.observe("t", "s", "END", 1.0)
        before = predictor.status("t")
        predictor.observe("t", "never-seen", "END", 2.0)
        after = predictor.status("t")
        assert (after.num_learned, after.num_live_sessions, after.recent_top1) == (
            before.num_learned, 0, before.recent_top1) and before.num_learned == 1
