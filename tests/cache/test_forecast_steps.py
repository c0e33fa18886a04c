"""`Forecast.waits_on_tool` knows a tool step by the step namespace (`cache.forecast`), not
by guessing from the name (FI6, QA76 #2): a tool called `start` or `user` (the tracer's
`after` kinds, another namespace) or `USER` / `END` (escaped as `tool:NAME`) is a tool."""
from __future__ import annotations

from cache.forecast import Forecast, is_tool_step, tool_step


def test_waits_on_tool_knows_tools_whatever_their_names():
    for name in ("start", "user", "search", "USER", "END", "ASSISTANT_TEXT", "<oov>"):
        forecast = Forecast("t", "s", 0.0, next_step={tool_step(name): 0.96, "END": 0.04}, p_end=0.04)
        assert forecast.waits_on_tool(), name
    for control in ("USER", "ASSISTANT_TEXT", "END"):
        assert not Forecast("t", "s", 0.0, next_step={control: 1.0}).waits_on_tool()
    assert not is_tool_step("END") and is_tool_step("start") and is_tool_step("<oov>")


def test_the_gap_forecasters_steps_keep_a_tool_named_like_its_bucket_apart_from_the_pooled_waits():
    from cache.forecast_source import RequestSeen
    from cache.gap_forecaster import OTHER_STEP, GapForecaster, GapForecasterConfig
    forecaster = GapForecaster(GapForecasterConfig(max_steps_per_tenant=3))
    for i, tools in enumerate([("<oov>",), ("USER",), ("b",), ("c",)]):
        forecaster.observe(RequestSeen("t", f"s{i}", float(i), after="start", tool_calls=tools))
    steps = [forecaster._waiting[("t", f"s{i}")].step for i in range(4)]
    assert steps == ["tool:tool:<oov>", "tool:tool:USER", "tool:b", OTHER_STEP]
    forecasts = [set(forecaster.forecast("t", f"s{i}", 5.0).next_step) - {"END"} for i in range(4)]
    assert forecasts == [{"tool:<oov>"}, {"tool:USER"}, {"b"}, {"<oov>"}]
    assert all(forecaster.forecast("t", f"s{i}", 5.0).waits_on_tool() for i in range(4))
