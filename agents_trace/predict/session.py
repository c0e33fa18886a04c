"""The live state of one agent session inside the predictor.

Invariants: `state` is the filter state of `history` under `model` (or None when there
is no model); `history` holds at most `max_history_steps` steps, the last; `head` the first
`max_history_steps // 4` of those it no longer holds (empty while it holds them all), so
what the session teaches when it ends (`learned`) keeps its start; `prediction` is the
next-step prediction for exactly this (model, history, tenant version) or None.
`pending` holds the tools the session's last response asked for, until its next step
(pending_tools.py); `pending_prediction` caches the forecast they imply, keyed by the
tenant version and the tenant's abandon counts it was made under. `num_answers` counts
the text answers (runs of silent steps) the session has given, all of them, not only
those `history` still holds. `guess_misses` is the length of the session's current run of
real guesses (tenant.py `observe`) that missed: 0 after a hit, one more after each miss.
A model swap is detected by identity and repaired by re-filtering `history` once
(O(len * K^2)); every other step is one O(K^2) filter update.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .returns import ReturnMixture
from .step_model import StepModel, StepState
from .vocabulary import Vocabulary


@dataclass(slots=True)
class Prediction:
    """p1: next-step distribution over `vocab`; p2: the distribution after the silent
    step `silent_id` (None when there is none or it is negligible); `version`: the
    tenant version it was computed under. `mixture` caches the time-independent part of
    the return forecast for one duration table (the only field ever reassigned)."""

    version: int
    vocab: Vocabulary
    p1: np.ndarray
    p2: np.ndarray | None
    silent_id: int | None
    mixture: ReturnMixture | None = None


@dataclass(slots=True)
class SessionState:
    started_s: float
    last_step_s: float
    waiting_since_s: float
    history: list[str] = field(default_factory=list)
    model: StepModel | None = None
    state: StepState | None = None
    prediction: Prediction | None = None
    pending: tuple[str, ...] = ()
    pending_prediction: tuple[tuple[int, float], Prediction] | None = None
    num_answers: int = 0
    guess_misses: int = 0
    head: list[str] = field(default_factory=list)

    def sync(self, model: StepModel | None) -> StepState | None:
        """The filter state under `model`, re-filtering the history after a swap."""
        if model is not self.model:
            self.model = model
            self.state = None if model is None else model.state_after(self.history)
            self.prediction = None
        return self.state

    def score_guess(self, hit: bool) -> None:
        """Count one real guess of this session: a hit ends the run of misses."""
        self.guess_misses = 0 if hit else self.guess_misses + 1

    def guesses_trusted(self, max_misses: int) -> bool:
        """False while the session's own last `max_misses` real guesses all missed
        (0: never false): its forecasts are then not confident, whatever the tenant's
        trust, until one of its guesses hits again."""
        return max_misses == 0 or self.guess_misses < max_misses

    def advance(self, symbol: str, max_history_steps: int, silent: tuple[str, ...] = ()) -> None:
        """Append one observed step; O(K^2) under the current model."""
        if symbol in silent and not (self.history and self.history[-1] in silent):
            self.num_answers += 1
        self.history.append(symbol)
        if len(self.history) > max_history_steps:
            if len(self.head) < max_history_steps // 4:
                self.head.append(self.history[0])
            del self.history[0]
        if self.model is not None and self.state is not None:
            self.state = self.model.advance(self.state, self.model.encode(symbol))
        self.prediction = None

    def learned(self) -> list[str]:
        """The steps the session teaches when it ends: all of them while at most
        `max_history_steps * 5 // 4` (its head and history), else its first
        `max_history_steps // 4` and its last `max_history_steps` (QA188: a long session
        learned from its last steps only started mid-run, without its `USER`)."""
        return self.head + self.history
