"""The simulator fed by the HMM predictor through its cache adapter (agents_trace)."""
from __future__ import annotations

import pytest

pytest.importorskip("hmmlearn")

from agents_trace.predict.cache_adapter import PredictorForecastSource, steps_after  # noqa: E402
from agents_trace.predict.config import PredictorConfig  # noqa: E402
from agents_trace.predict.predictor import Predictor  # noqa: E402
from cache.forecast_source import RequestSeen  # noqa: E402
from cache.sim.replay import SimConfig, replay  # noqa: E402
from cache.sim.requests import to_sim_requests  # noqa: E402
from cache.trace_format import TraceRecord  # noqa: E402


def test_steps_after_reads_the_trace_labels() -> None:
    assert steps_after("tool:ls,tool:cd") == ["ls", "cd"]
    assert steps_after("tool:ls") == ["ls"]
    assert steps_after("user") == ["USER"]
    assert steps_after("start") == [] and steps_after(None) == []


def agent_records() -> list[TraceRecord]:
    """Sessions of one tenant: USER -> ls (3 s) -> text answer; the next session starts
    20 s later. Each step extends the prompt by two 4-token blocks."""
    records = []
    for i in range(12):
        t = 20.0 * i
        base = [1000 * i + k for k in range(2)]
        records.append(TraceRecord(t=t, input_tokens=8, output_tokens=2, tenant="t", session=f"s{i}",
                                   after="start", tool_calls=["ls"], hash_ids=base))
        records.append(TraceRecord(t=t + 3.0, input_tokens=16, output_tokens=2, tenant="t", session=f"s{i}",
                                   after="tool:ls", hash_ids=base + [1000 * i + 2, 1000 * i + 3]))
    return records


def test_predictor_source_forecasts_tool_returns_in_a_replay() -> None:
    predictor = Predictor(PredictorConfig(background_refits=False, min_sessions=4))
    predictor.fit_sequences("t", [["USER", "ls", "ASSISTANT_TEXT"]] * 8)
    source = PredictorForecastSource(predictor, end_after_s=10.0)
    requests = to_sim_requests(agent_records(), 4)
    result = replay(requests, SimConfig(num_hot_blocks=64, policy="predictive", block_size=4), source=source)
    assert result.totals.num_hot_hit_blocks == 12 * 2  # every tool return hits its first step
    source.observe(RequestSeen("t", "fresh", 1000.0, after="start", tool_calls=("ls",), num_blocks=2))
    forecast = source.forecast("t", "fresh", 1000.0)
    assert forecast is not None and forecast.next_step.get("ls", 0.0) > 0.5
    assert source.forecast("t", "s0", 1000.0) is None  # idle past end_after_s: ended and learned


def test_a_replay_from_an_empty_predictor_learns_when_refits_run_when_due() -> None:
    """Sessions idle past `end_after_s` end and are learned; without background refits a
    tenant is fitted only with `refit_when_due` (a new deployment's cold start)."""
    requests = to_sim_requests(agent_records(), 4)
    fitted = {}
    for refit in (False, True):
        predictor = Predictor(PredictorConfig(background_refits=False, min_sessions=4))
        source = PredictorForecastSource(predictor, end_after_s=30.0, refit_when_due=refit)
        replay(requests, SimConfig(num_hot_blocks=64, policy="predictive", block_size=4), source=source)
        fitted[refit] = predictor._tenant("t").model is not None
        assert predictor._tenant("t").num_learned >= 8  # sessions s0.. ended 30 s after their last request
        predictor.close()
    assert fitted == {False: False, True: True}


def test_a_session_ended_idle_is_told_to_on_end_once_and_the_gap_forecaster_forgets_it() -> None:
    """Paired as the gateway pairs them (`FallbackSource`), the gap forecaster forgets a
    session as soon as the predictor's adapter ends it, as the relay does at SessionEnded."""
    from cache.forecast_source import FallbackSource
    from cache.gap_forecaster import GapForecaster

    gaps = GapForecaster()
    ended = []

    def on_end(tenant: str, session: str) -> None:
        ended.append((tenant, session))
        gaps.forget(tenant, session)

    with Predictor(PredictorConfig(background_refits=False)) as predictor:
        source = FallbackSource(PredictorForecastSource(predictor, end_after_s=10.0, on_end=on_end), gaps)
        source.observe(RequestSeen("t", "a", 0.0, after="start", num_blocks=2))
        source.observe(RequestSeen("t", "b", 5.0, after="start", num_blocks=2))
        source.observe(RequestSeen("t", "a", 8.0, after="user", num_blocks=2))   # a's idle clock restarts
        assert gaps.forecast("t", "b", 14.0) is not None and ended == []
        source.observe(RequestSeen("t", "c", 16.0, after="start", num_blocks=2))
        assert ended == [("t", "b")] and gaps.forecast("t", "b", 16.0) is None
        assert gaps.forecast("t", "a", 16.0) is not None
        assert source.forecast("t", "a", 19.0) is None   # ended at 18 s: neither source forecasts it
        assert ended == [("t", "b"), ("t", "a")]
