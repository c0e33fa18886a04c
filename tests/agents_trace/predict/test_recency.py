"""Recency memory: decayed counts, eviction, and the Dirichlet adaptation."""
from __future__ import annotations

import numpy as np
import pytest

from agents_trace.predict.recency import RecencyMemory, RecencyParams, adapt
from agents_trace.predict.vocabulary import Vocabulary


def test_recency_memory_decays_per_session() -> None:
    memory = RecencyMemory(decay=0.5)
    memory.learn(["USER", "ls", "END"])
    memory.learn(["USER", "cd", "END"])
    counts, total = memory.evidence(["USER"], 1)
    # Newest session weighs 1, the one before 0.5.
    assert counts == pytest.approx({"cd": 1.0, "ls": 0.5})
    assert total == pytest.approx(1.5)


def test_recency_memory_uses_longer_context() -> None:
    memory = RecencyMemory(decay=1.0)
    memory.learn(["USER", "ls", "cd", "END"])
    counts, _ = memory.evidence(["USER", "ls"], 3)  # context (<s>, USER, ls)
    assert counts == {"cd": 1.0}
    assert memory.evidence(["cd", "cd", "ls"], 3) == ({}, 0.0)


def test_recency_memory_evicts_oldest_session() -> None:
    memory = RecencyMemory(decay=1.0, max_sessions=2)
    memory.learn(["USER", "ls", "END"])
    memory.learn(["USER", "cd", "END"])
    memory.learn(["USER", "cd", "END"])
    counts, total = memory.evidence(["USER"], 1)
    assert counts == pytest.approx({"cd": 2.0})
    assert total == pytest.approx(2.0)
    assert len(memory.sessions) == 2


def test_recency_memory_survives_many_rescales() -> None:
    memory = RecencyMemory(decay=0.5, max_sessions=8)
    for _ in range(2000):  # scale passes 1e100 several times
        memory.learn(["USER", "ls", "END"])
    counts, total = memory.evidence(["USER"], 1)
    assert total == pytest.approx(sum(0.5 ** k for k in range(8)))
    assert counts["ls"] == pytest.approx(total)


def test_adapt_without_evidence_is_static() -> None:
    vocab = Vocabulary.from_symbols(["ls"])
    static = np.full(vocab.size, 1.0 / vocab.size)
    out = adapt(static, RecencyMemory(0.7), RecencyParams(0.7, 1.0), ["USER"], vocab)
    np.testing.assert_array_equal(out, static)


def test_adapt_moves_toward_recent_sessions() -> None:
    vocab = Vocabulary.from_symbols(["ls", "cd"])
    static = np.full(vocab.size, 1.0 / vocab.size)
    memory = RecencyMemory(1.0)
    for _ in range(3):
        memory.learn(["USER", "cd", "END"])
    out = adapt(static, memory, RecencyParams(1.0, 1.0), ["USER"], vocab)
    assert out.sum() == pytest.approx(1.0)
    assert int(np.argmax(out)) == vocab.index["cd"]


def test_recency_memory_rebuilt_keeps_sessions() -> None:
    memory = RecencyMemory(decay=0.9)
    memory.learn(["USER", "ls", "END"])
    again = memory.rebuilt(0.5)
    assert again.decay == 0.5 and again.sessions == memory.sessions
