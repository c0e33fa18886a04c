"""How many text answers a tenant's sessions give before they end.

Agents' sessions end after a number of user turns, not at random: in the recorded BFCL
sessions the odds of ending after the k-th text answer rise from 0 at k = 1 to 63 % at
k = 5. A step model over symbols counts turns only as far as its hidden states happen
to, and on some tenants not at all (the same P(END) after every answer). Its context
still tells it things a count does not (which tools the last turn used), so the count
corrects it per turn rather than replacing it: at each refit, the tenant's finished
sessions are filtered through the new model, and after each silent step of the k-th
text answer

    offset_k = logit((ended_k + strength * mean_k) / (seen_k + strength)) - logit(mean_k)

where mean_k is the model's mean P(END) there and ended_k counts the steps END followed;
a forecast after a silent step of the k-th answer adds offset_k to the model's log-odds
of END. A text answer is a run of silent steps (usually one); answers past `cap` are
pooled at `cap`; with few sessions the offsets shrink to 0.

Invariant: a calibration belongs to the model it was computed with (installed together).
"""
from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from cache.forecast import END_SYMBOL

from .step_model import StepModel

_EPS = 1e-4


def answer_outcomes(sequence: Sequence[str], silent: Collection[str]) -> Iterator[tuple[int, int, bool]]:
    """(k, i, ended) for each silent step i of a finished `sequence` that has a step after
    it: k counts text answers (runs of silent steps) from 1, ended says END comes next.
    Every silent step of a run is scored, since a forecast is made after each (a run
    goes on with another silent step: not ended)."""
    k = 0
    for i, symbol in enumerate(sequence):
        if symbol not in silent:
            continue
        if i == 0 or sequence[i - 1] not in silent:
            k += 1
        if i + 1 < len(sequence):
            yield k, i, sequence[i + 1] == END_SYMBOL


def _logit(p: float) -> float:
    p = min(max(p, _EPS), 1.0 - _EPS)
    return math.log(p / (1.0 - p))


@dataclass(frozen=True, slots=True)
class TurnCalibration:
    """Log-odds offsets of P(END) after the k-th text answer (index k - 1, the last one
    pooling the rest); empty: no correction."""

    offsets: tuple[float, ...] = ()

    def p_end(self, answers: int, p_model: float) -> float:
        """P(END) after the session's `answers`-th text answer, given the model's."""
        if answers < 1 or not self.offsets:
            return p_model
        offset = self.offsets[min(answers, len(self.offsets)) - 1]
        if offset == 0.0:
            return p_model
        return 1.0 / (1.0 + math.exp(-(_logit(p_model) + offset)))


def calibrate(model: StepModel, sequences: Sequence[Sequence[str]], silent: Collection[str],
              cap: int, strength: float) -> TurnCalibration:
    """The per-answer offsets of `model` on the tenant's finished `sequences`
    (O(total steps x K^2); run where the model is fitted, not on the request path)."""
    if cap < 1 or strength < 0:
        raise ValueError("cap must be at least 1 and strength not negative")
    seen = np.zeros(cap)
    ended = np.zeros(cap)
    p_sum = np.zeros(cap)
    end_id = model.vocab.end_id
    for sequence in sequences:
        answers = {i: (k, is_end) for k, i, is_end in answer_outcomes(sequence, silent)}
        if not answers:
            continue
        state = model.start_state()
        for i, symbol in enumerate(sequence[:max(answers) + 1]):
            state = model.advance(state, model.encode(symbol))
            if i in answers:
                k, is_end = answers[i]
                p = model.static_next(state)
                index = min(k, cap) - 1
                seen[index] += 1.0
                ended[index] += is_end
                p_sum[index] += float(p[end_id] / p.sum())
    offsets = []
    for index in range(cap):
        if seen[index] == 0:
            offsets.append(0.0)
            continue
        mean = p_sum[index] / seen[index]
        rate = (ended[index] + strength * mean) / (seen[index] + strength)
        offsets.append(_logit(rate) - _logit(mean))
    return TurnCalibration(tuple(offsets))
