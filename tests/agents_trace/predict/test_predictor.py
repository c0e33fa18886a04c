"""Predictor: online filtering, cold start, isolation, refits under load, confidence."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from agents_trace.predict.config import PredictorConfig
from agents_trace.predict.predictor import Predictor
from agents_trace.predict.vocabulary import OOV_SYMBOL

from .synthetic import agent_sessions


def quiet_config(**overrides) -> PredictorConfig:
    return PredictorConfig(**{"background_refits": False, "min_sessions": 5, **overrides})


def check_forecast(forecast) -> None:
    assert sum(forecast.next_step.values()) == pytest.approx(1.0)
    assert 0.0 <= forecast.p_end <= 1.0
    probs = [p for _, p in forecast.p_return_within]
    assert probs == sorted(probs)
    assert all(p <= 1.0 - forecast.p_end + 1e-9 for p in probs)
    etas = [s for _, s in forecast.eta_quantiles_s]
    assert etas == sorted(etas)


def play(predictor: Predictor, tenant: str, session: str, steps: list[str],
         t0_s: float = 0.0) -> None:
    for i, symbol in enumerate(steps):
        predictor.observe(tenant, session, symbol, t0_s + i, gap_s=1.0)
    predictor.end_session(tenant, session)


@pytest.fixture()
def predictor():
    p = Predictor(quiet_config())
    yield p
    p.close()


def test_predictor_filters_incrementally(predictor) -> None:
    model = predictor.fit_sequences("a", agent_sessions(40))
    steps = ["USER", "search", "read"]
    for i, symbol in enumerate(steps):
        predictor.observe("a", "s", symbol, float(i))
    state = predictor._tenant("a").sessions["s"]
    np.testing.assert_allclose(state.state.pred, model.state_after(steps).pred)
    forecast = predictor.forecast("a", "s", 3.0)
    check_forecast(forecast)
    assert forecast.confident
    assert max(forecast.next_step, key=forecast.next_step.get) in ("read", "ASSISTANT_TEXT",
                                                                   "write")


def test_predictor_unknown_symbol_does_not_raise(predictor) -> None:
    predictor.fit_sequences("a", agent_sessions(40))
    predictor.observe("a", "s", "USER", 0.0)
    predictor.observe("a", "s", "tool_never_seen", 1.0, gap_s=0.3)
    forecast = predictor.forecast("a", "s", 1.5)
    check_forecast(forecast)
    assert OOV_SYMBOL in forecast.next_step
    predictor.end_session("a", "s")


def test_predictor_unknown_session_is_forecast_from_start(predictor) -> None:
    predictor.fit_sequences("a", agent_sessions(40))
    forecast = predictor.forecast("a", "nobody", 10.0)
    assert max(forecast.next_step, key=forecast.next_step.get) == "USER"


def test_predictor_cold_start_uses_global_model(predictor) -> None:
    predictor.fit_sequences("big", agent_sessions(60))
    predictor.refit_global()
    # Two sessions are fewer than min_sessions: the tenant stays cold.
    assert predictor.fit_sequences("new", agent_sessions(2, seed=5, tools=("q", "r", "s"))) is None
    assert predictor.model_of("new") is None
    predictor.observe("new", "s", "USER", 0.0)
    forecast = predictor.forecast("new", "s", 0.5)
    check_forecast(forecast)
    assert not forecast.confident
    # The global model knows a tool follows USER; the mass goes to the new tenant's own
    # tools (and the new-tool bucket), never to another tenant's tool names.
    assert "search" not in forecast.next_step
    own_tools = forecast.next_step["q"] + forecast.next_step["r"] + forecast.next_step[OOV_SYMBOL]
    assert own_tools > 0.5
    # Once it has enough sessions it gets its own model.
    model = predictor.fit_sequences("new", agent_sessions(5, seed=6, tools=("q", "r", "s")))
    assert model is not None and predictor.model_of("new") is model


def test_predictor_tenants_are_isolated(predictor) -> None:
    predictor.fit_sequences("b", agent_sessions(30, seed=1))
    model_b = predictor.model_of("b")
    predictor.observe("b", "s", "USER", 0.0)
    before = predictor.forecast("b", "s", 1.0)
    for i in range(30):
        play(predictor, "a", f"a{i}", ["USER", "other_tool", "ASSISTANT_TEXT"], t0_s=i)
    predictor.refit("a")
    predictor.refit_global()
    assert predictor.model_of("b") is model_b
    after = predictor.forecast("b", "s", 1.0)
    assert after.next_step == before.next_step
    assert after.p_return_within == before.p_return_within
    assert "other_tool" not in after.next_step


def test_predictor_refit_under_concurrent_forecasts() -> None:
    predictor = Predictor(quiet_config())
    predictor.fit_sequences("a", agent_sessions(40))
    first = predictor.model_of("a")
    errors: list[BaseException] = []
    stop = threading.Event()

    def forecaster(k: int) -> None:
        try:
            i = 0
            while not stop.is_set():
                session = f"w{k}-{i % 5}"
                predictor.observe("a", session, "USER", float(i))
                check_forecast(predictor.forecast("a", session, float(i) + 0.5))
                if i % 5 == 4:
                    predictor.end_session("a", session)
                i += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=forecaster, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    try:
        for _ in range(2):
            assert predictor.refit("a") is not None
        assert predictor.request_refit("a")
        assert predictor.wait_for_refits(timeout_s=30.0)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30.0)
        predictor.close()
    assert not errors, errors
    assert predictor.model_of("a") is not first


def test_predictor_background_refit_after_enough_sessions() -> None:
    predictor = Predictor(PredictorConfig(min_sessions=5))
    try:
        for i, steps in enumerate(agent_sessions(5)):
            play(predictor, "a", f"s{i}", steps)
        assert predictor.wait_for_refits(timeout_s=30.0)
        assert predictor.model_of("a") is not None
        assert predictor.status("a").is_warm
    finally:
        predictor.close()


def test_predictor_reports_low_confidence_when_inaccurate() -> None:
    predictor = Predictor(quiet_config(half_life_steps=20.0, min_top1=0.4))
    predictor.fit_sequences("a", agent_sessions(40))
    predictor.observe("a", "probe", "USER", 0.0)
    assert predictor.forecast("a", "probe", 0.5).confident
    # The tenant's agent changes: its steps become a random walk over the same symbols,
    # which neither the fitted model nor the recency memory can predict.
    rng = np.random.default_rng(0)
    symbols = ["USER", "search", "read", "write", "ASSISTANT_TEXT"]
    for i in range(20):
        play(predictor, "a", f"x{i}", list(rng.choice(symbols, size=8)))
    status = predictor.status("a")
    assert status.recent_top1 < 0.4
    assert not predictor.forecast("a", "probe", 1.0).confident
    predictor.close()


def test_predictor_observe_end_ends_session(predictor) -> None:
    predictor.fit_sequences("a", agent_sessions(10))
    learned = predictor.status("a").num_learned
    predictor.observe("a", "s", "USER", 0.0)
    predictor.observe("a", "s", "END", 1.0)
    assert predictor.status("a").num_live_sessions == 0
    assert predictor.status("a").num_learned == learned + 1


def test_predictor_waiting_raises_p_end(predictor) -> None:
    predictor.fit_sequences("a", agent_sessions(40), gaps=[[1.0] * len(s) for s in
                                                            agent_sessions(40)])
    for i, symbol in enumerate(["USER", "search", "read", "ASSISTANT_TEXT"]):
        predictor.observe("a", "s", symbol, float(i), gap_s=1.0)
    predictor.mark_waiting("a", "s", 3.5)
    soon = predictor.forecast("a", "s", 3.5)
    late = predictor.forecast("a", "s", 3.5 + 3600.0)
    check_forecast(soon)
    check_forecast(late)
    assert late.p_end > soon.p_end


def test_status_of_a_tenant_never_seen_is_none_and_creates_nothing():
    with Predictor(PredictorConfig(background_refits=False)) as predictor:
        assert predictor.status("never") is None
        assert predictor.tenants() == []
