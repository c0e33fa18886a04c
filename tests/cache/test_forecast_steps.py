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
