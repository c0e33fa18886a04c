"""MAP-EM interpolation weights."""
from __future__ import annotations

import numpy as np
import pytest

from agents_trace.predict.mixture import fit_weights


def test_fit_weights_recovers_generating_mixture() -> None:
    rng = np.random.default_rng(0)
    a, b = np.array([0.9, 0.1]), np.array([0.2, 0.8])
    # Symbols drawn from 0.7 * a + 0.3 * b; each row: what a and b gave the symbol.
    symbols = (rng.random(20000) >= 0.7 * a[0] + 0.3 * b[0]).astype(int)
    probs = np.stack([a[symbols], b[symbols]], axis=1)
    weights = fit_weights(probs, np.array([0.5, 0.5]), prior_strength=0.0, num_iter=500)
    assert weights[0] == pytest.approx(0.7, abs=0.02)


def test_fit_weights_no_data_returns_prior() -> None:
    weights = fit_weights(np.zeros((0, 3)), np.array([2.0, 1.0, 1.0]), 10.0)
    np.testing.assert_allclose(weights, [0.5, 0.25, 0.25])


def test_fit_weights_prior_dominates_tiny_data() -> None:
    probs = np.array([[1.0, 0.01]])
    weights = fit_weights(probs, np.array([0.5, 0.5]), prior_strength=100.0)
    assert weights[0] == pytest.approx(0.5, abs=0.01)
    assert weights.sum() == pytest.approx(1.0)
