"""Add-alpha n-gram baselines (unigram, bigram) that the evaluation reports beside the
predictor, over the same per-tenant vocabulary (OOV bucket included).

P(s | context) = (count(context, s) + alpha) / (count(context) + alpha * V), the context
being the previous order-1 symbols with BOS padding. Counts can keep growing (`learn`),
so the baselines can follow the same online protocol as the predictor.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

BOS_ID = -1


class AddAlphaNgram:
    def __init__(self, order: int, alpha: float, num_symbols: int) -> None:
        if order < 1:
            raise ValueError("order must be >= 1")
        self.order = order
        self.alpha = alpha
        self.num_symbols = num_symbols
        self._counts: dict[tuple[int, ...], np.ndarray] = {}

    def _context(self, history: Sequence[int]) -> tuple[int, ...]:
        width = self.order - 1
        if width == 0:
            return ()
        tail = tuple(history[-width:])
        return (BOS_ID,) * (width - len(tail)) + tail

    def learn(self, sequence: Sequence[int]) -> None:
        for t, symbol in enumerate(sequence):
            key = self._context(sequence[:t])
            counts = self._counts.get(key)
            if counts is None:
                counts = self._counts[key] = np.zeros(self.num_symbols)
            counts[symbol] += 1.0

    def next_distribution(self, history: Sequence[int]) -> np.ndarray:
        counts = self._counts.get(self._context(history))
        if counts is None:
            return np.full(self.num_symbols, 1.0 / self.num_symbols)
        return (counts + self.alpha) / (counts.sum() + self.alpha * self.num_symbols)
