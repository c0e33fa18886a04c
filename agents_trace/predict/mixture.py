"""Linear interpolation weights for the next-step components, fitted by MAP-EM.

How the HMM and the n-gram evidence are combined: the static next-step distribution is
`w_hmm * P_hmm + w_ngram * P_kn + w_uniform / V`. The weights maximise the likelihood of
the validation split (never the test data) plus a Dirichlet prior that pulls them toward
`prior_weights` with `prior_strength` pseudo-symbols, so a tenant with a tiny validation
split keeps sensible weights instead of putting everything on one component.

Invariant: the returned weights are positive and sum to 1.
"""
from __future__ import annotations

import numpy as np


def fit_weights(true_probs: np.ndarray, prior_weights: np.ndarray,
                prior_strength: float, num_iter: int = 60) -> np.ndarray:
    """MAP mixture weights.

    true_probs: (N, M), the probability each of M components gave the symbol that
    actually came next at each of N validation positions.
    """
    prior = np.asarray(prior_weights, dtype=np.float64)
    prior = prior / prior.sum()
    weights = prior.copy()
    if true_probs.shape[0] == 0:
        return weights
    pseudo = prior_strength * prior
    for _ in range(num_iter):
        resp = true_probs * weights
        resp /= resp.sum(axis=1, keepdims=True)
        new = resp.sum(axis=0) + pseudo
        new /= new.sum()
        if np.abs(new - weights).max() < 1e-6:
            weights = new
            break
        weights = new
    return np.maximum(weights, 1e-9) / np.maximum(weights, 1e-9).sum()
