"""Discrete HMM parameters, exact forward filtering, and hmmlearn-based fitting.

hmmlearn (and with it scikit-learn and SciPy's statistics: about 1 s of CPU) is imported
by the first fit, not with this module: a forecast, a restore and a gateway's start never
need it (`import_hmmlearn` lets a background fitter import it ahead, under a lock).

`HmmParams` is the fitted model as plain arrays. Invariants: every row of `start`,
`trans` and `emit` sums to 1 and is strictly positive (fits are smoothed), so the filter
never divides by zero and an unseen symbol gets a small, finite probability.

The online filter keeps the *predictive* state `pred = P(z_t | x_<t)`; one observed
symbol costs O(K^2): `alpha = pred * emit[:, x]`, normalise, `pred' = alpha @ trans`.
The next-symbol distribution is `pred @ emit`, i.e. exactly
`P(x_t = s | x_<t) = exp(score(x + [s]) - score(x))`.
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from .fit_stop import FitStop, current_stop

EMIT_SMOOTHING = 0.01
TRANS_SMOOTHING = 0.001


@dataclass(frozen=True, slots=True)
class HmmParams:
    """start (K,), trans (K, K), emit (K, V); all rows positive and summing to 1."""

    start: np.ndarray
    trans: np.ndarray
    emit: np.ndarray

    @property
    def num_states(self) -> int:
        return int(self.start.shape[0])

    @property
    def num_symbols(self) -> int:
        return int(self.emit.shape[1])


@dataclass(frozen=True, slots=True)
class HmmSpec:
    """How to initialise and how long to train one candidate.

    `seeded_from_bigram`: one state per symbol, emissions near the identity and
    transitions from bigram counts, so EM starts from the bigram model and refines it;
    otherwise `num_states` states with emissions drawn around the unigram.
    """

    num_states: int
    seeded_from_bigram: bool
    num_iter: int
    seed: int = 0


def smooth(start: np.ndarray, trans: np.ndarray, emit: np.ndarray) -> HmmParams:
    """Mix each row with a uniform row so every probability is positive (empty rows
    become uniform)."""
    def rows(m: np.ndarray, eps: float) -> np.ndarray:
        m = np.atleast_2d(np.asarray(m, dtype=np.float64))
        totals = m.sum(axis=1, keepdims=True)
        m = np.where(totals > 0, m / np.where(totals > 0, totals, 1.0), 1.0 / m.shape[1])
        return (1.0 - eps) * m + eps / m.shape[1]

    return HmmParams(rows(start, TRANS_SMOOTHING)[0], rows(trans, TRANS_SMOOTHING),
                     rows(emit, EMIT_SMOOTHING))


def filter_step(params: HmmParams, pred: np.ndarray, symbol_id: int) -> np.ndarray:
    """The predictive state after observing `symbol_id` from predictive state `pred`."""
    alpha = pred * params.emit[:, symbol_id]
    return (alpha / alpha.sum()) @ params.trans


def forward_predictive(params: HmmParams, sequences: Sequence[Sequence[int]]
                       ) -> np.ndarray:
    """P(x_t | x_<t) for every position of every sequence, rows in sequence-major order.

    Batched over sequences (one numpy step per time index), so scoring a validation
    split costs O(T_max) numpy calls rather than one Python step per symbol.
    """
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)
    total = int(lengths.sum())
    out = np.empty((total, params.num_symbols))
    if total == 0:
        return out
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    padded = np.zeros((len(sequences), int(lengths.max())), dtype=np.int64)
    for i, seq in enumerate(sequences):
        padded[i, : len(seq)] = seq
    pred = np.tile(params.start, (len(sequences), 1))
    for t in range(padded.shape[1]):
        active = np.nonzero(lengths > t)[0]
        pred_t = pred[active]
        out[offsets[active] + t] = pred_t @ params.emit
        alpha = pred_t * params.emit[:, padded[active, t]].T
        alpha /= alpha.sum(axis=1, keepdims=True)
        pred[active] = alpha @ params.trans
    return out


def log_likelihood(params: HmmParams, sequences: Sequence[Sequence[int]]) -> float:
    """Total log P(sequences) under the model."""
    if not sequences:
        return 0.0
    flat = np.concatenate([np.asarray(s, dtype=np.int64) for s in sequences])
    probs = forward_predictive(params, sequences)[np.arange(flat.size), flat]
    return float(np.log(probs).sum())


def num_free_params(params: HmmParams) -> int:
    k, v = params.num_states, params.num_symbols
    return (k - 1) + k * (k - 1) + k * (v - 1)


class _DropHmmlearnWarnings(logging.Filter):
    """hmmlearn warns on tiny data and on non-monotone EM steps; both are expected
    here (small tenants, smoothing) and would flood the gateway's log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.WARNING


@contextlib.contextmanager
def _quiet_hmmlearn() -> Iterator[None]:
    loggers = [logging.getLogger("hmmlearn.base"), logging.getLogger("hmmlearn")]
    quiet = _DropHmmlearnWarnings()
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)


def hmmlearn_classes() -> tuple[type, type]:
    """hmmlearn's `CategoricalHMM` and `ConvergenceMonitor` (imported on the first call)."""
    from hmmlearn.base import ConvergenceMonitor
    from hmmlearn.hmm import CategoricalHMM

    return CategoricalHMM, ConvergenceMonitor


def import_hmmlearn(lock: contextlib.AbstractContextManager | None = None) -> None:
    """Import hmmlearn now, holding `lock` while it imports (a process that imports large
    libraries in several threads serialises them on one lock: gateway/forecasting_start.py)."""
    with lock if lock is not None else contextlib.nullcontext():
        hmmlearn_classes()


def _stopping_monitor(stop: FitStop, tol: float, n_iter: int):
    """hmmlearn's convergence monitor, but one that raises FitStopped after an EM iteration
    once `stop` is requested (hmmlearn asks `converged` after every iteration)."""
    _, convergence_monitor = hmmlearn_classes()

    class StoppingMonitor(convergence_monitor):
        @property
        def converged(self) -> bool:
            stop.check()
            return super().converged

    return StoppingMonitor(tol, n_iter, False)


def initial_params(spec: HmmSpec, sequences: Sequence[Sequence[int]],
                   num_symbols: int) -> HmmParams:
    """Deterministic (given `spec.seed`) starting point for EM; see `HmmSpec`."""
    rng = np.random.default_rng(spec.seed)
    counts = np.full(num_symbols, 0.5)
    for seq in sequences:
        np.add.at(counts, np.asarray(seq, dtype=np.int64), 1.0)
    unigram = counts / counts.sum()
    if spec.seeded_from_bigram:
        first = np.full(num_symbols, 0.1)
        bigram = np.full((num_symbols, num_symbols), 0.1)
        for seq in sequences:
            if len(seq):
                first[seq[0]] += 1.0
                # int64 even when empty: a one-step sequence's pairs are none, not a float array
                np.add.at(bigram, (np.asarray(seq[:-1], dtype=np.int64), np.asarray(seq[1:], dtype=np.int64)), 1.0)
        emit = np.full((num_symbols, num_symbols), 0.02) + np.eye(num_symbols)
        return smooth(first, bigram, emit)
    k = spec.num_states
    emit = rng.dirichlet(2.0 * num_symbols * unigram, size=k)
    trans = rng.dirichlet(np.full(k, 5.0), size=k)
    return smooth(np.full(k, 1.0 / k), trans, emit)


def run_em(params: HmmParams, sequences: Sequence[Sequence[int]], num_iter: int
           ) -> HmmParams:
    """`num_iter` Baum-Welch steps with hmmlearn (scaling implementation) from `params`;
    returns smoothed parameters. Under a worker's `fit_stop.stoppable_by`, raises
    `FitStopped` instead of entering EM, or between two EM iterations, once that worker's
    stop is requested (fit_stop.py says why)."""
    if num_iter <= 0 or not sequences:
        return params
    stop = current_stop()
    x = np.concatenate([np.asarray(s, dtype=np.int64) for s in sequences]).reshape(-1, 1)
    categorical_hmm, _ = hmmlearn_classes()
    model = categorical_hmm(n_components=params.num_states, n_features=params.num_symbols,
                            n_iter=num_iter, tol=1e-9, implementation="scaling",
                            init_params="", params="ste")
    model.startprob_ = params.start.copy()
    model.transmat_ = params.trans.copy()
    model.emissionprob_ = params.emit.copy()
    if stop is not None:
        model.monitor_ = _stopping_monitor(stop, model.tol, model.n_iter)
    with (contextlib.nullcontext() if stop is None else stop.native()), _quiet_hmmlearn():
        model.fit(x, [len(s) for s in sequences])
    return smooth(model.startprob_, model.transmat_, model.emissionprob_)
