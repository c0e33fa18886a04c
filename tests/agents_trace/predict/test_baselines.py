"""Add-alpha baselines."""
from __future__ import annotations

import pytest

from agents_trace.predict.baselines import AddAlphaNgram


def test_add_alpha_bigram_known_answer() -> None:
    model = AddAlphaNgram(order=2, alpha=0.1, num_symbols=3)
    model.learn([0, 1, 1, 2])
    # After 1: counts (0, 1, 1), total 2 -> (c + 0.1) / (2 + 0.3).
    dist = model.next_distribution([0, 1])
    assert dist.tolist() == pytest.approx([0.1 / 2.3, 1.1 / 2.3, 1.1 / 2.3])
    # BOS context saw symbol 0 once.
    assert model.next_distribution([])[0] == pytest.approx(1.1 / 1.3)


def test_add_alpha_unigram_ignores_history() -> None:
    model = AddAlphaNgram(order=1, alpha=0.1, num_symbols=2)
    model.learn([0, 0, 1])
    assert model.next_distribution([1, 1]).tolist() == pytest.approx([2.1 / 3.2, 1.1 / 3.2])
