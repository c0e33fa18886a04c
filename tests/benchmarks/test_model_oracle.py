"""The generator-model forecast source forecasts exactly the generator's distributions."""
import math
from pathlib import Path

import pytest

from agents_trace.workload.generator import WorkloadConfig, tool_median_s
from agents_trace.workload.tool_patterns import ToolPatterns
from cache.forecast_source import RequestSeen
from cache.policies.return_curve import ReturnCurve

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def source_class(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from model_oracle import GeneratorModelSource
    return GeneratorModelSource


def test_forecasts_follow_the_generators_distributions(source_class):
    config = WorkloadConfig(num_tenants=1, num_sessions=1, seed=3)
    patterns = [ToolPatterns("d", {"START": {"USER": 4}, "USER": {"ls": 4},
                                   "ls": {"ASSISTANT_TEXT": 4}, "ASSISTANT_TEXT": {"END": 1, "USER": 3}})]
    source = source_class(config, patterns, [10, 50])
    source.observe(RequestSeen("tenant0", "s", 100.0, "user", ("ls",), 4))
    tool = source.forecast("tenant0", "s", 100.0)
    assert tool.p_end == 0.0 and tool.made_at_s == 100.0
    assert tool.eta_s(0.5) == pytest.approx(0.2 + tool_median_s(config, "ls"))
    source.observe(RequestSeen("tenant0", "s", 130.0, "tool:ls", (), 5))
    text = source.forecast("tenant0", "s", 130.0)
    assert text.p_end == pytest.approx(0.25)  # END follows a text answer 1 time in 4
    assert text.eta_s(0.5) == pytest.approx(1.0 + config.think_time_median_s)
    curve = ReturnCurve.from_forecast(text)
    assert curve.p_by(1.0 + config.think_time_median_s) == pytest.approx(0.75 * 0.5, abs=1e-6)
    assert curve.p_ever == pytest.approx(0.75)
    assert math.isclose(curve.p_by(1e6), 0.75)
    assert source.forecast("tenant0", "other", 130.0) is None


def test_odds_after_a_text_answer_follow_the_recorded_turn_counts(source_class):
    config = WorkloadConfig(num_tenants=1, num_sessions=1, seed=3)
    chain = {"START": {"USER": 4}, "USER": {"ASSISTANT_TEXT": 4}, "ASSISTANT_TEXT": {"END": 1, "USER": 3}}
    # sessions of 1, 2 or 3 turns, 2:1:1
    source = source_class(config, [ToolPatterns("d", chain, {1: 2, 2: 1, 3: 1})], [10, 10, 10])
    p_end = []
    for i in range(3):
        source.observe(RequestSeen("tenant0", "s", 100.0 + 30 * i, "start" if i == 0 else "user", (), 4))
        p_end.append(source.forecast("tenant0", "s", 100.0 + 30 * i).p_end)
    assert p_end == pytest.approx([0.5, 0.5, 1.0])  # 2 of 4 end after turn 1, 1 of 2 after turn 2


def test_a_request_after_a_text_answer_is_a_user_turn_only_with_the_chains_odds(source_class):
    """One text answer in three is followed by a tool, not the user (q = 2/3), so the
    user turns so far are a posterior and the odds of going on are a mixture."""
    config = WorkloadConfig(num_tenants=1, num_sessions=1, seed=3)
    chain = {"START": {"USER": 4}, "USER": {"ASSISTANT_TEXT": 4}, "ls": {"ASSISTANT_TEXT": 4},
             "ASSISTANT_TEXT": {"END": 1, "USER": 2, "ls": 1}}
    source = source_class(config, [ToolPatterns("d", chain, {1: 2, 2: 1, 3: 1})], [10, 10, 10])
    p_end = []
    for i in range(3):
        source.observe(RequestSeen("tenant0", "s", 100.0 + 30 * i, "start" if i == 0 else "user", (), 4))
        p_end.append(source.forecast("tenant0", "s", 100.0 + 30 * i).p_end)
    # turn 1: 2 of 4 sessions go on; then u = 2 (odds 2/3, N >= 3 w.p. 1/2) or u = 1 with
    # N >= 2 known (1/3, surely on): 2/3; third answer: 1/2 by the same sums (by hand)
    assert p_end == pytest.approx([0.5, 1 / 3, 0.5])
