"""Tool names never collide with the predictor's control symbols (FI6, QA76 #1, #2): a tool
called `END`, `USER` or `ASSISTANT_TEXT` (or `start`, `user`, `<oov>`) is a tool step
everywhere: it does not end or split a session, it is a TOOL in the global class model,
its gap is a tool's, and a session waiting on it waits on a tool."""
from __future__ import annotations

from agents_trace.predict.cache_adapter import steps_after
from agents_trace.predict.config import PredictorConfig
from agents_trace.predict.predictor import Predictor
from agents_trace.predict.step_model import TOOL_CLASS, step_class
from agents_trace.records import After, SessionEnded, SessionId, Step, ToolCall
from agents_trace.symbols import arrival_symbols, check_forecast, predictor_subscriber
from cache.forecast import CONTROL_STEPS, Forecast, tool_step

RESERVED_LOOKING = ("USER", "ASSISTANT_TEXT", "END", "tool:x", "<oov>", "<other tool>")


def _step(index: int, arrived_s: float, after: After, calls: tuple[str, ...]) -> Step:
    return Step("t", SessionId("s"), index, "header", "chat", "m", None, arrived_s, arrived_s + 0.5, after,
                None if index == 0 else 2.0, None if index == 0 else arrived_s - 2.0, 3, False, 10, 0, 2, 0.1,
                "w0", "tool_calls" if calls else "stop",
                tuple(ToolCall(f"c{index}{i}", name) for i, name in enumerate(calls)))


def _session_calling(tool: str) -> list:
    """USER -> tool -> tool -> a text answer, then the session idles out."""
    tools = After("tools", (ToolCall("c", tool),))
    return [_step(0, 0.0, After("start"), (tool,)), _step(1, 2.5, tools, (tool,)),
            _step(2, 5.0, tools, ()), SessionEnded("t", SessionId("s"), 3, 5.5, "idle")]


def test_tool_step_escapes_only_names_that_read_as_control_or_reserved():
    for name in ("search", "start", "user", "end", "TOOL", "read_file-2"):
        assert tool_step(name) == name            # ordinary names keep their spelling (saved files stay valid)
    escaped = [tool_step(name) for name in RESERVED_LOOKING]
    assert escaped == ["tool:USER", "tool:ASSISTANT_TEXT", "tool:END", "tool:tool:x", "tool:<oov>",
                       "tool:<other tool>"]
    assert not CONTROL_STEPS & set(escaped) and len(set(escaped)) == len(escaped)
    assert all(step_class(s) == TOOL_CLASS for s in escaped)


def test_a_tool_called_END_is_one_session_of_tool_steps():
    predictor = Predictor(PredictorConfig(background_refits=False))
    now = [0.0]
    feed = predictor_subscriber(predictor, lambda: now[0])
    try:
        events = _session_calling("END")
        for event in events[:2]:
            feed(event)
        now[0] = 3.0
        waiting = predictor.forecast("t", "s", 3.0)          # waits on the tool END
        assert waiting.waits_on_tool() and waiting.p_end < 0.5
        assert max(waiting.next_step, key=waiting.next_step.get) == "tool:END"
        for event in events[2:]:
            now[0] = 6.0
            feed(event)
        assert predictor.status("t").num_learned == 1         # not three fragments
        state = predictor._tenant("t")
        assert list(state.finished) == [("USER", "tool:END", "tool:END", "ASSISTANT_TEXT", "END")]
        assert list(predictor._global_sessions) == [("USER", "TOOL", "TOOL", "ASSISTANT_TEXT", "END")]
        assert "tool:END" in state.durations.to_arrays()[0]  # its gaps are the tool's
    finally:
        predictor.close()


def test_a_tool_called_USER_is_checked_as_a_tool():
    step = _session_calling("USER")[1]
    assert arrival_symbols(step) == ("tool:USER",)
    told = Forecast("t", "s", 0.0, next_step={"tool:USER": 0.9, "USER": 0.1})
    check = check_forecast(told, step)
    assert (check.predicted, check.actual, check.is_hit) == ("tool:USER", "tool:USER", True)
    assert not check_forecast(Forecast("t", "s", 0.0, next_step={"USER": 1.0}), step).is_hit


def test_a_replayed_after_field_spells_its_tools_as_steps():
    assert steps_after("tool:END,tool:search") == ["tool:END", "search"]
    assert steps_after("user") == ["USER"] and steps_after("start") == []
