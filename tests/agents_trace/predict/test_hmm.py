"""Known-answer tests for the HMM filter on a hand-worked two-state model."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hmmlearn.hmm import CategoricalHMM

from agents_trace.predict.hmm import (HmmParams, HmmSpec, filter_step, forward_predictive,
                                      initial_params, log_likelihood, run_em, smooth)

# Two states, two symbols. Worked by hand below.
START = np.array([0.6, 0.4])
TRANS = np.array([[0.7, 0.3], [0.4, 0.6]])
EMIT = np.array([[0.9, 0.1], [0.2, 0.8]])
PARAMS = HmmParams(START, TRANS, EMIT)


def brute_force_log_prob(x: list[int]) -> float:
    """log P(x) by summing over every hidden path (exponential, fine for tiny x)."""
    total = 0.0
    for path in itertools.product(range(2), repeat=len(x)):
        p = START[path[0]] * EMIT[path[0], x[0]]
        for t in range(1, len(x)):
            p *= TRANS[path[t - 1], path[t]] * EMIT[path[t], x[t]]
        total += p
    return math.log(total)


def hmmlearn_model() -> CategoricalHMM:
    model = CategoricalHMM(n_components=2, n_features=2, init_params="")
    model.startprob_, model.transmat_, model.emissionprob_ = START, TRANS, EMIT
    return model


def test_filter_step_hand_worked_two_state() -> None:
    # After observing symbol 0: alpha = [0.6*0.9, 0.4*0.2] = [0.54, 0.08], P(x1=0) = 0.62.
    filtered = np.array([0.54, 0.08]) / 0.62
    # Predictive state for t=2: filtered @ TRANS.
    expected_pred = np.array([filtered[0] * 0.7 + filtered[1] * 0.4,
                              filtered[0] * 0.3 + filtered[1] * 0.6])
    pred = filter_step(PARAMS, START, 0)
    np.testing.assert_allclose(pred, expected_pred, rtol=1e-12)
    np.testing.assert_allclose(pred, [0.6612903225806451, 0.3387096774193548], rtol=1e-12)
    # Next symbol: pred @ EMIT.
    np.testing.assert_allclose(pred @ EMIT, [0.6629032258064516, 0.3370967741935484],
                               rtol=1e-12)


@pytest.mark.parametrize("x", [[0], [1, 1], [0, 1, 1, 0], [1, 0, 0, 1, 1]])
def test_filter_step_next_symbol_equals_brute_force_score_ratio(x: list[int]) -> None:
    pred = START
    for symbol in x:
        pred = filter_step(PARAMS, pred, symbol)
    next_dist = pred @ EMIT
    model = hmmlearn_model()
    for s in range(2):
        brute = math.exp(brute_force_log_prob(x + [s]) - brute_force_log_prob(x))
        via_hmmlearn = math.exp(model.score(np.array([x + [s]]).T) - model.score(np.array([x]).T))
        assert next_dist[s] == pytest.approx(brute, rel=1e-10)
        assert next_dist[s] == pytest.approx(via_hmmlearn, rel=1e-10)


def test_forward_predictive_matches_stepwise_filter() -> None:
    sequences = [[0, 1, 1, 0], [1], [1, 0, 0, 1, 1]]
    batch = forward_predictive(PARAMS, sequences)
    rows = []
    for seq in sequences:
        pred = START
        for symbol in seq:
            rows.append(pred @ EMIT)
            pred = filter_step(PARAMS, pred, symbol)
    np.testing.assert_allclose(batch, np.array(rows), rtol=1e-12)


def test_log_likelihood_equals_brute_force() -> None:
    sequences = [[0, 1, 1, 0], [1, 0]]
    expected = sum(brute_force_log_prob(s) for s in sequences)
    assert log_likelihood(PARAMS, sequences) == pytest.approx(expected, rel=1e-12)


def test_smooth_rows_positive_and_normalised() -> None:
    params = smooth(np.array([1.0, 0.0]), np.array([[0.0, 0.0], [1.0, 0.0]]),
                    np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    for m in (params.start[None, :], params.trans, params.emit):
        assert (m > 0).all()
        np.testing.assert_allclose(m.sum(axis=1), 1.0)


def test_run_em_does_not_lower_likelihood() -> None:
    rng = np.random.default_rng(0)
    sequences = [list(rng.integers(0, 3, size=8)) for _ in range(20)]
    params = initial_params(HmmSpec(3, False, 0, seed=1), sequences, 3)
    before = log_likelihood(params, sequences)
    after = log_likelihood(run_em(params, sequences, 10), sequences)
    assert after >= before - 1e-6


def test_initial_params_bigram_seeded_starts_as_bigram() -> None:
    sequences = [[0, 1, 2], [0, 1, 2], [0, 2]]
    params = initial_params(HmmSpec(3, True, 0), sequences, 3)
    assert params.num_states == 3
    # From symbol 0 the bigram says 1 (2 of 3) before 2: the seeded HMM agrees.
    pred = filter_step(params, params.start, 0)
    next_dist = pred @ params.emit
    assert next_dist[1] > next_dist[2] > next_dist[0]


def test_initial_params_bigram_seeded_take_one_step_sessions() -> None:
    """A session of one step has no pairs: its empty slice is no float index (a background
    refit failed with IndexError on a tenant whose sessions included one)."""
    params = initial_params(HmmSpec(3, True, 0), [[2], [0, 1], [1]], 3)
    assert params.num_states == 3 and np.allclose(params.start.sum(), 1.0)


def test_hmmlearn_is_imported_by_the_first_fit_not_with_the_predictor() -> None:
    """hmmlearn brings scikit-learn and SciPy's statistics (about 1 s of CPU): a gateway's
    start (the predictor's import, a forecast) does without them; a fit imports them."""
    import subprocess
    import sys
    script = """if True:
        import sys
        from agents_trace.predict.hmm import HmmParams, HmmSpec, initial_params, log_likelihood, run_em
        from agents_trace.predict.predictor import Predictor
        Predictor()
        params = initial_params(HmmSpec(2, False, 2), [[0, 1, 0]], 2)
        log_likelihood(params, [[0, 1]])
        before = sorted(name for name in ("hmmlearn", "sklearn", "scipy.stats") if name in sys.modules)
        run_em(params, [[0, 1, 0, 1]], 2)
        print(before, "hmmlearn" in sys.modules)
    """
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[0] == "[] True"
