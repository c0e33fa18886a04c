"""Pending tools: after a response asks for tools, the forecast is that tool, unless the
session is abandoned, returning after that tool's own duration."""
from __future__ import annotations

import numpy as np
import pytest

from agents_trace.predict.cache_adapter import PredictorForecastSource
from agents_trace.predict.config import PredictorConfig
from agents_trace.predict.fit import FitConfig
from agents_trace.predict.pending_tools import (PRIOR_ABANDONED, PRIOR_WAITS, AbandonCounts,
                                                pending_distribution)
from agents_trace.predict.predictor import Predictor
from agents_trace.predict.vocabulary import OOV_SYMBOL, Vocabulary
from cache.forecast_source import RequestSeen

from .synthetic import agent_sessions
from .test_predictor import check_forecast

TOOL_S = {"USER": 20.0, "search": 2.0, "read": 30.0, "write": 5.0, "ASSISTANT_TEXT": 0.0}


@pytest.fixture()
def predictor():
    p = Predictor(PredictorConfig(background_refits=False, min_sessions=5))
    yield p
    p.close()


def fit_with_gaps(predictor: Predictor, tenant: str = "a") -> None:
    sessions = agent_sessions(60)
    predictor.fit_sequences(tenant, sessions, gaps=[[TOOL_S[s] for s in seq] for seq in sessions])


def top(forecast) -> tuple[str, float]:
    return max(forecast.next_step.items(), key=lambda kv: kv[1])


def test_abandon_counts_are_a_beta_posterior_mean() -> None:
    counts = AbandonCounts()
    assert counts.p_abandon() == pytest.approx(PRIOR_ABANDONED / PRIOR_WAITS)
    for symbol in ["END", "END"] + ["read"] * 8:
        counts.record(symbol)
    assert (counts.abandoned, counts.continued) == (2.0, 8.0)
    assert counts.p_abandon() == pytest.approx((PRIOR_ABANDONED + 2) / (PRIOR_WAITS + 10))


def test_pending_distribution_puts_the_mass_on_the_tool_and_end() -> None:
    vocab = Vocabulary.from_symbols(["search", "read"])
    p = pending_distribution(vocab, "read", 0.1)
    assert p.sum() == pytest.approx(1.0)
    assert p[vocab.index["read"]] == pytest.approx(0.9)
    assert p[vocab.end_id] == pytest.approx(0.1)
    unknown = pending_distribution(vocab, "never_seen", 0.1)
    assert unknown[vocab.index[OOV_SYMBOL]] == pytest.approx(0.9)


def test_forecast_after_tool_calls_is_that_tool_with_its_own_duration(predictor) -> None:
    fit_with_gaps(predictor)
    etas = {}
    for tool in ("search", "read"):
        session = f"s-{tool}"
        predictor.observe("a", session, "USER", 0.0, gap_s=None)
        predictor.mark_waiting("a", session, 1.0, (tool, "write"))
        forecast = predictor.forecast("a", session, 1.0)
        check_forecast(forecast)
        name, p = top(forecast)
        assert name == tool
        assert p == pytest.approx(1.0 - PRIOR_ABANDONED / PRIOR_WAITS)
        assert forecast.p_end == pytest.approx(PRIOR_ABANDONED / PRIOR_WAITS)
        etas[tool] = forecast.eta_s(0.5)
    # The learned durations are exactly 2 s and 30 s: the median ETA is each tool's own.
    assert etas["search"] == pytest.approx(2.0, rel=0.15)
    assert etas["read"] == pytest.approx(30.0, rel=0.15)


def test_without_pending_tools_the_step_model_forecasts_as_before(predictor) -> None:
    fit_with_gaps(predictor)
    for session, tools in (("plain", None), ("text", ())):
        predictor.observe("a", session, "USER", 0.0)
        predictor.observe("a", session, "search", 1.0, gap_s=2.0)
        if tools is not None:
            predictor.mark_waiting("a", session, 1.0, tools)
    plain, text = predictor.forecast("a", "plain", 1.5), predictor.forecast("a", "text", 1.5)
    assert top(plain)[0] == "read"
    assert plain.next_step == text.next_step


def test_a_cold_tenant_forecasts_the_tool_asked_for_not_end(predictor) -> None:
    # No model at all (nothing learned): the step model is uniform, END as likely as any.
    predictor.observe("new", "s", "USER", 0.0)
    predictor.mark_waiting("new", "s", 0.5, ("get_weather",))
    forecast = predictor.forecast("new", "s", 0.5)
    check_forecast(forecast)
    assert not forecast.confident
    # get_weather is not in a cold tenant's vocabulary yet: the forecast still names it.
    assert OOV_SYMBOL not in forecast.next_step
    assert top(forecast) == ("get_weather", pytest.approx(1.0 - PRIOR_ABANDONED / PRIOR_WAITS))
    assert forecast.next_step["END"] == pytest.approx(PRIOR_ABANDONED / PRIOR_WAITS)


def test_the_next_step_clears_the_pending_tools_and_is_counted(predictor) -> None:
    fit_with_gaps(predictor)
    tenant = predictor._tenant("a")
    predictor.observe("a", "s", "USER", 0.0)
    predictor.mark_waiting("a", "s", 0.5, ("search",))
    top1_before, scored_before = tenant.accuracy.top1, tenant.accuracy.num_scored
    predictor.observe("a", "s", "search", 2.5, gap_s=2.0)
    assert tenant.sessions["s"].pending == ()
    assert (tenant.abandons.abandoned, tenant.abandons.continued) == (0.0, 1.0)
    # Not scored: the response named the tool, so its forecast was no guess (QA160).
    assert tenant.accuracy.num_scored == scored_before
    assert tenant.accuracy.top1 == top1_before
    # Back on the step model: after `search` comes `read`.
    assert top(predictor.forecast("a", "s", 2.5))[0] == "read"
    # A session abandoned while tools are pending counts as abandoned.
    predictor.observe("a", "t", "USER", 0.0)
    predictor.mark_waiting("a", "t", 0.5, ("read",))
    predictor.observe("a", "t", "END", 100.0)
    assert (tenant.abandons.abandoned, tenant.abandons.continued) == (1.0, 1.0)
    assert "t" not in tenant.sessions


def test_learned_abandons_lower_the_return_odds(predictor) -> None:
    fit_with_gaps(predictor)
    for i in range(30):
        predictor.observe("a", f"gone{i}", "USER", 0.0)
        predictor.mark_waiting("a", f"gone{i}", 0.5, ("search",))
        predictor.observe("a", f"gone{i}", "END", 60.0)
    predictor.observe("a", "s", "USER", 0.0)
    predictor.mark_waiting("a", "s", 0.5, ("search",))
    forecast = predictor.forecast("a", "s", 0.5)
    expected = (PRIOR_ABANDONED + 30) / (PRIOR_WAITS + 30)
    assert forecast.p_end == pytest.approx(expected)
    assert forecast.p_return(300.0) <= 1.0 - expected + 1e-9


def test_the_cache_adapter_passes_the_requests_tool_calls(predictor) -> None:
    fit_with_gaps(predictor)
    source = PredictorForecastSource(predictor)
    source.observe(RequestSeen("a", "s", 0.0, "start", ("read",), 4))
    forecast = source.forecast("a", "s", 0.0)
    assert top(forecast)[0] == "read"
    assert np.isclose(forecast.eta_s(0.5), 30.0, rtol=0.15)
    source.observe(RequestSeen("a", "s", 30.0, "tool:read", (), 6))
    # A text answer: nothing pending, the session now waits on the user (or ends).
    assert set(top(source.forecast("a", "s", 30.0))[0:1]) <= {"USER", "END"}


def test_a_cold_tenant_trusts_its_tool_waits_after_enough_of_them_ended() -> None:
    # No session has finished, so there is no step model (min_sessions): a forecast after
    # a text answer stays unconfident, one while a tool is pending becomes confident once
    # min_tool_waits of the tenant's tool waits ended, returning after the learned 8 s
    # (the prior's median is 2 s); the top-1 rule has its 10 scored steps after four.
    predictor = Predictor(PredictorConfig(background_refits=False, min_tool_waits=5))
    try:
        t_s = 0.0
        confident = []
        for i in range(6):
            session = f"s{i}"
            predictor.observe("new", session, "USER", t_s)
            predictor.mark_waiting("new", session, t_s + 0.5, ("search",))
            confident.append(predictor.forecast("new", session, t_s + 0.5).confident)
            predictor.observe("new", session, "search", t_s + 8.5, gap_s=8.0)
            predictor.observe("new", session, "ASSISTANT_TEXT", t_s + 9.0)
            t_s += 10.0
        assert predictor._tenant("new").model is None
        assert confident == [False, False, False, False, False, True]
        predictor.mark_waiting("new", "s5", t_s, ())  # waits on its user after the answer
        assert not predictor.forecast("new", "s5", t_s).confident
        predictor.observe("new", "s6", "USER", t_s)
        predictor.mark_waiting("new", "s6", t_s, ("search",))
        tool_wait = predictor.forecast("new", "s6", t_s)
        assert tool_wait.confident and tool_wait.waits_on_tool()
        assert tool_wait.eta_s(0.5) == pytest.approx(8.0, rel=0.25)
    finally:
        predictor.close()


def _run_new_tool(predictor: Predictor, tenant: str, tool: str, gap_s: float, sessions: int) -> None:
    """`sessions` finished sessions that each run `tool` three times (`gap_s` each)."""
    t_s = 10_000.0
    for i in range(sessions):
        session = f"{tool}-{i}"
        predictor.observe(tenant, session, "USER", t_s)
        for _ in range(3):
            predictor.mark_waiting(tenant, session, t_s, (tool,))
            t_s += gap_s
            predictor.observe(tenant, session, tool, t_s, gap_s=gap_s)
        predictor.observe(tenant, session, "ASSISTANT_TEXT", t_s + 0.2)
        t_s += 1000.0
        predictor.observe(tenant, session, "END", t_s, gap_s=900.0)


def _pending_eta(predictor: Predictor, tenant: str, tool: str) -> tuple[float, object]:
    predictor.observe(tenant, "live", "USER", 0.0)
    predictor.mark_waiting(tenant, "live", 0.0, (tool,))
    forecast = predictor.forecast(tenant, "live", 0.0)
    check_forecast(forecast)
    predictor.end_session(tenant, "live", learn=False)
    return forecast.eta_s(0.5), forecast


def test_a_tool_new_since_the_fit_returns_after_its_own_learned_duration(predictor) -> None:
    # QA188 F1: fitted on 100 sessions of a 60 s tool; a new tool then runs 0.3 s three
    # times. It is not in the model's vocabulary until the next refit, yet its wait is
    # its own 0.3 s, not the tenant's all-steps gap (old: 54 s, marked confident).
    seqs = [["USER", "slow_report", "ASSISTANT_TEXT"] for _ in range(100)]
    predictor.fit_sequences("t", seqs, gaps=[[None, 60.0, None] for _ in seqs])
    eta_before, _ = _pending_eta(predictor, "t", "quick_check")
    assert eta_before > 30.0   # nothing learned of it yet: the tenant level
    _run_new_tool(predictor, "t", "quick_check", 0.3, sessions=1)
    assert not predictor.model_of("t").vocab.contains("quick_check")
    eta, forecast = _pending_eta(predictor, "t", "quick_check")
    assert forecast.confident and top(forecast)[0] == "quick_check"
    assert eta == pytest.approx(0.3, rel=0.1)
    # The known tool's wait is unchanged by it.
    assert _pending_eta(predictor, "t", "slow_report")[0] == pytest.approx(60.0, rel=0.1)


def test_a_tool_past_the_vocabulary_cap_returns_after_its_own_learned_duration() -> None:
    # A tenant whose vocabulary names one tool: the other shares `<other tool>`, whose
    # wait is still that tool's own once it has runs.
    predictor = Predictor(PredictorConfig(background_refits=False, min_sessions=5,
                                          fit=FitConfig(max_tool_symbols=1)))
    try:
        seqs = [["USER", "slow_report", "ASSISTANT_TEXT"] for _ in range(20)]
        seqs += [["USER", "quick_check", "ASSISTANT_TEXT"] for _ in range(5)]
        gaps = [[None, 60.0 if seq[1] == "slow_report" else 0.3, None] for seq in seqs]
        predictor.fit_sequences("t", seqs, gaps=gaps)
        vocab = predictor.model_of("t").vocab
        assert not vocab.contains("quick_check") and "<other tool>" in vocab.index
        _run_new_tool(predictor, "t", "quick_check", 0.3, sessions=2)
        assert _pending_eta(predictor, "t", "quick_check")[0] == pytest.approx(0.3, rel=0.1)
    finally:
        predictor.close()
