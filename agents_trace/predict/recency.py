"""A tenant's memory of its most recent finished sessions, and the recency adaptation.

Why: an agent tenant's sessions are not exchangeable. Batch jobs and evaluation harnesses
run the same kind of task many times in a row, so the last few sessions say more about
the next one than the long-run average does. The memory keeps exponentially decayed
counts (per finished session, factor `decay`) of "after these last k steps came s" for
k in `RECENCY_ORDERS`, and adapts the static forecast as a Dirichlet posterior:

    P1 = (r1[s] + strength * P_static[s]) / (r1_total + strength)     (last step)
    P  = (r3[s] + strength * P1[s])       / (r3_total + strength)     (last 3 steps)

With no recent evidence for the context this is exactly the static forecast. `decay`
and `strength` are chosen on the validation split (fit.py), which may switch it off.

Invariants: stored weights are relative to `scale` (lazy decay: learning a session
multiplies `scale` by 1/decay instead of touching every count); at most `max_sessions`
sessions contribute, the oldest is subtracted when a new one arrives. Keys are symbol
strings, so the memory survives a model swap that changes the vocabulary.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .vocabulary import Vocabulary

RECENCY_ORDERS = (1, 3)
BOS = "<s>"
_RESCALE_ABOVE = 1e100


@dataclass(frozen=True, slots=True)
class RecencyParams:
    """decay: weight factor per newer finished session; strength: pseudo-count of the
    static forecast (large = trust the static model)."""

    decay: float
    strength: float


def context_key(history: Sequence[str], order: int) -> tuple[str, ...]:
    tail = tuple(history[-order:])
    return (BOS,) * (order - len(tail)) + tail


class RecencyMemory:
    """Decayed context counts of one tenant's last `max_sessions` learned sessions."""

    def __init__(self, decay: float, max_sessions: int = 64) -> None:
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.decay = decay
        self.max_sessions = max_sessions
        self._scale = 1.0
        self._sessions: deque[tuple[tuple[str, ...], float]] = deque()
        self._counts: dict[tuple[str, ...], dict[str, float]] = {}
        self._totals: dict[tuple[str, ...], float] = {}

    @property
    def sessions(self) -> list[tuple[str, ...]]:
        """The remembered sessions, oldest first."""
        return [seq for seq, _ in self._sessions]

    def rebuilt(self, decay: float) -> "RecencyMemory":
        """A new memory with another decay, holding the same sessions."""
        memory = RecencyMemory(decay, self.max_sessions)
        for seq in self.sessions:
            memory.learn(seq)
        return memory

    def learn(self, sequence: Sequence[str]) -> None:
        """Add one finished session (END included) as the newest."""
        self._scale /= self.decay
        if self._scale > _RESCALE_ABOVE:
            self._rescale()
        seq = tuple(sequence)
        self._add(seq, self._scale)
        self._sessions.append((seq, self._scale))
        if len(self._sessions) > self.max_sessions:
            old_seq, old_weight = self._sessions.popleft()
            self._add(old_seq, -old_weight)

    def _add(self, seq: tuple[str, ...], weight: float) -> None:
        for t, symbol in enumerate(seq):
            for order in RECENCY_ORDERS:
                key = context_key(seq[:t], order)
                nexts = self._counts.setdefault(key, {})
                value = nexts.get(symbol, 0.0) + weight
                total = self._totals.get(key, 0.0) + weight
                if value <= 1e-12 * self._scale:
                    nexts.pop(symbol, None)
                else:
                    nexts[symbol] = value
                if total <= 1e-12 * self._scale or not nexts:
                    self._counts.pop(key, None)
                    self._totals.pop(key, None)
                else:
                    self._totals[key] = total

    def _rescale(self) -> None:
        factor = 1.0 / self._scale
        for nexts in self._counts.values():
            for symbol in nexts:
                nexts[symbol] *= factor
        for key in self._totals:
            self._totals[key] *= factor
        self._sessions = deque((seq, w * factor) for seq, w in self._sessions)
        self._scale = 1.0

    def evidence(self, history: Sequence[str], order: int) -> tuple[dict[str, float], float]:
        """(decayed counts of the next symbol, their total) after the last `order` steps;
        the newest session counts 1."""
        key = context_key(history, order)
        nexts = self._counts.get(key)
        if not nexts:
            return {}, 0.0
        inv = 1.0 / self._scale
        return {s: w * inv for s, w in nexts.items()}, self._totals[key] * inv


def adapt(static: np.ndarray, memory: RecencyMemory, params: RecencyParams,
          history: Sequence[str], vocab: Vocabulary) -> np.ndarray:
    """The static next-step distribution adapted to the tenant's recent sessions."""
    p = static
    for order in RECENCY_ORDERS:
        counts, total = memory.evidence(history, order)
        if total <= 0.0:
            continue
        vec = np.zeros(vocab.size)
        unknown = vocab.unknown_id
        for symbol, weight in counts.items():
            vec[vocab.index.get(symbol, unknown)] += weight
        p = (vec + params.strength * p) / (total + params.strength)
    return p
