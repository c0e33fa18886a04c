"""A gap forecaster's statistics survive a write and a read, and nothing else gets in."""
from __future__ import annotations

import json
import random

import pytest

from cache.forecast_source import RequestSeen
from cache.gap_forecaster import GapForecaster, GapForecasterConfig
from cache.gap_memory import FORMAT, LearnedGaps, gaps_from_json, gaps_to_json, read_gaps, write_gaps
from cache.gap_stats import LogGapStats, ReturnCounts
from tests.cache.test_sim_forecasting import feed


def test_a_restored_forecaster_forecasts_a_new_session_as_the_original_does(tmp_path) -> None:
    original = GapForecaster(GapForecasterConfig(recount_every=8))
    feed(original, random.Random(0), 200)
    write_gaps(original.learned(), tmp_path / "gaps.json")
    restored = GapForecaster(GapForecasterConfig(recount_every=8))
    restored.adopt(read_gaps(tmp_path / "gaps.json"))
    assert [p.name for p in tmp_path.iterdir()] == ["gaps.json"]   # no temporary file left
    assert restored.learned() == original.learned()
    for forecaster in (original, restored):
        forecaster.observe(RequestSeen("t", "after-restart", 30_000.0, tool_calls=("fast",), num_blocks=4))
    before = original.forecast("t", "after-restart", 30_000.0)
    after = restored.forecast("t", "after-restart", 30_000.0)
    assert after.confident and after == before   # same gaps, odds and confidence


def test_the_json_keeps_mixed_level_keys_exactly() -> None:
    learned = LearnedGaps(
        (0, 1, 2),
        gaps={(): LogGapStats(2.0, 1.5, 1.25), ("t", "user", 1): LogGapStats(1.0, 0.5, 0.25)},
        returns={("t", "tool:a", 0, None, 3): ReturnCounts(3.0, 1.0)},
        p_estimates={("t",): 0.75},
        steps={"t": {"user", "tool:a"}})
    data = json.loads(json.dumps(gaps_to_json(learned)))
    assert data["format"] == FORMAT and data["steps"] == {"t": ["tool:a", "user"]}
    assert gaps_from_json(data) == learned


@pytest.mark.parametrize("text", [
    "not json", "[]", json.dumps({"format": "stepahead-gaps/0"}),
    json.dumps({"format": FORMAT, "return_features": [0]}),
    json.dumps({"format": FORMAT, "return_features": [0], "gaps": [[{"x": 1}, 1, 0, 0]],
                "returns": [], "p_estimates": [], "steps": {}}),
])
def test_anything_but_a_gaps_file_is_refused(tmp_path, text) -> None:
    path = tmp_path / "gaps.json"
    path.write_text(text)
    with pytest.raises(ValueError):
        read_gaps(path)


def test_statistics_split_by_other_features_are_not_adopted() -> None:
    trained = GapForecaster(GapForecasterConfig(answers_cap=0))
    trained.observe(RequestSeen("t", "s", 0.0, after="start"))
    other = GapForecaster()
    with pytest.raises(ValueError, match="return features"):
        other.adopt(trained.learned())
    assert other.learned() == LearnedGaps((0, 1, 2))   # untouched


def test_learned_is_a_copy() -> None:
    forecaster = GapForecaster()
    forecaster.observe(RequestSeen("t", "s", 0.0, after="start"))
    forecaster.observe(RequestSeen("t", "s", 5.0, after="user"))
    kept = forecaster.learned()
    forecaster.observe(RequestSeen("t", "s", 9.0, after="user"))
    assert kept.gaps[("t",)].num_gaps == 1.0 and forecaster.learned().gaps[("t",)].num_gaps == 2.0
