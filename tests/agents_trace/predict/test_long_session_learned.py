"""A session longer than `max_history_steps` is learned with its start (QA188 F5): its first
`max_history_steps // 4` steps and its last `max_history_steps`, never from mid-run."""
from __future__ import annotations

from agents_trace.predict.config import PredictorConfig
from agents_trace.predict.predictor import Predictor
from agents_trace.predict.session import SessionState


def _learned(num_tools: int, max_history_steps: int = 512) -> tuple[str, ...]:
    config = PredictorConfig(background_refits=False, max_history_steps=max_history_steps)
    with Predictor(config) as predictor:
        predictor.observe("t", "s", "USER", 0.0)
        for i in range(num_tools):
            predictor.observe("t", "s", f"tool_{i}", 1.0 + i, 0.1)
        predictor.observe("t", "s", "END", 10_000.0, 100.0)
        return predictor._tenants["t"].finished[-1]


def test_a_session_past_the_history_is_learned_from_its_user_start():
    learned = _learned(600)
    assert learned[:2] == ("USER", "tool_0")
    assert learned == ("USER", *(f"tool_{i}" for i in range(600)), "END")


def test_a_much_longer_session_keeps_its_head_and_its_last_steps():
    learned = _learned(100, max_history_steps=40)
    steps = ["USER", *(f"tool_{i}" for i in range(100))]
    assert learned == (*steps[:10], *steps[-39:], "END")   # END is the history's last step


def test_the_history_stays_bounded():
    state = SessionState(0.0, 0.0, 0.0)
    for i in range(1000):
        state.advance(f"tool_{i}", 40)
    assert len(state.history) == 40 and len(state.head) == 10
    assert state.learned()[:1] == ["tool_0"]
