"""A fitted next-step model: HMM + KN n-gram + uniform, interpolated, plus recency params.

`StepModel` is immutable once built: the predictor swaps a whole new one in on refit, so
a reader that took a reference keeps a consistent model for the rest of its call.

`StepState` is the per-session filter state under one StepModel. Invariants: `pred` is
the HMM predictive state P(z_t | x_<t) (sums to 1); `ngram_context` holds the last
order-1 symbol ids with BOS padding; advancing one step costs O(K^2 + order).
When `abstract` is set the model works on step classes (see cold_start.py) and every
symbol is mapped to its class before encoding.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from cache.forecast import CONTROL_STEPS

from .hmm import HmmParams
from .ngram import NgramTable
from .recency import RecencyParams
from .vocabulary import Vocabulary

TOOL_CLASS = "TOOL"


def step_class(symbol: str) -> str:
    """USER, ASSISTANT_TEXT and END stay themselves; every tool becomes TOOL (a tool whose
    name is a control step's arrives escaped, `cache.forecast.tool_step`, so it is a tool
    here too)."""
    if symbol in CONTROL_STEPS:
        return symbol
    return TOOL_CLASS


@dataclass(frozen=True, slots=True)
class FitReport:
    """What the fit chose and how it did on its validation split (None: no split)."""

    num_sessions: int
    num_states: int
    seeded_from_bigram: bool
    num_iter: int
    weights: tuple[float, float, float]
    recency: RecencyParams | None
    val_top1: float | None
    val_logloss: float | None
    num_val_symbols: int
    fit_s: float


@dataclass(frozen=True, slots=True)
class StepState:
    """Filter state of one session under one model; replaced, never mutated."""

    pred: np.ndarray
    ngram_context: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class StepModel:
    """Invariant: the `_`-prefixed arrays are derived from the public fields in
    `__post_init__` (weights folded in, emissions column-major) so that filtering and
    prediction are two or three vector operations each."""

    vocab: Vocabulary
    hmm: HmmParams
    ngram: NgramTable
    weights: tuple[float, float, float]
    recency: RecencyParams | None
    abstract: bool
    report: FitReport
    _emit_weighted: np.ndarray = field(init=False, repr=False)
    _ngram_weighted: np.ndarray = field(init=False, repr=False)
    _emit_columns: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        w_hmm, w_ngram, w_uniform = self.weights
        object.__setattr__(self, "_emit_weighted", w_hmm * self.hmm.emit)
        object.__setattr__(self, "_ngram_weighted",
                           w_ngram * self.ngram.probs + w_uniform / self.vocab.size)
        object.__setattr__(self, "_emit_columns", np.ascontiguousarray(self.hmm.emit.T))

    def encode(self, symbol: str) -> int:
        return self.vocab.encode_one(step_class(symbol) if self.abstract else symbol)

    def start_state(self) -> StepState:
        return StepState(self.hmm.start, self.ngram.context_of(()))

    def advance(self, state: StepState, symbol_id: int) -> StepState:
        """Filter one observed symbol: O(K^2) for the HMM, O(order) for the n-gram."""
        alpha = state.pred * self._emit_columns[symbol_id]
        pred = (alpha @ self.hmm.trans) / alpha.sum()
        context = state.ngram_context[1:] + (symbol_id,) if state.ngram_context else ()
        return StepState(pred, context)

    def state_after(self, symbols: Sequence[str]) -> StepState:
        state = self.start_state()
        for symbol in symbols:
            state = self.advance(state, self.encode(symbol))
        return state

    def static_next(self, state: StepState) -> np.ndarray:
        """The interpolated next-step distribution over `vocab` (before recency)."""
        return state.pred @ self._emit_weighted + self._ngram_weighted[
            self.ngram.row_of(state.ngram_context)]
