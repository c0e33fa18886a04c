"""Choosing a tenant's HMM: number of states, initialisation and EM iterations.

Candidates: a bigram-seeded HMM (one state per symbol, see `HmmSpec`) and
unigram-initialised HMMs with `state_counts` states. With a usable validation split each
candidate runs EM in chunks of `chunk_iter` iterations on the fit split and stops when
the validation log-likelihood stops improving (early stopping); the best candidate and
its iteration count win. With too few validation symbols the candidates are trained on
everything and compared by BIC instead.

Cost bound (a refit of 1,000 sessions must take well under 3 s): hmmlearn's E-step costs
a Python call per sequence, so selection trains on at most `max_select_sessions` of the
newest fit sessions, and the final model is warm-started from the winner and refined
on at most `max_train_sessions` of the newest sessions. The n-gram, which is cheap,
always sees every session.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .hmm import HmmParams, HmmSpec, initial_params, log_likelihood, num_free_params, run_em


@dataclass(frozen=True, slots=True)
class HmmSearch:
    state_counts: tuple[int, ...] = (4, 8, 16)
    max_seeded_states: int = 48
    chunk_iter: int = 5
    max_iter: int = 25
    max_select_sessions: int = 200
    max_train_sessions: int = 500
    min_val_symbols: int = 40
    bic_iter: int = 10
    seed: int = 0


def candidate_specs(search: HmmSearch, num_symbols: int, num_fit_symbols: int
                    ) -> list[HmmSpec]:
    """Seeded candidate when the vocabulary is small enough, plus every random-init size
    whose parameter count does not exceed the data (the smallest is always kept)."""
    specs = []
    if num_symbols <= search.max_seeded_states:
        specs.append(HmmSpec(num_symbols, True, 0, search.seed))
    sizes = sorted(search.state_counts)
    for i, k in enumerate(sizes):
        params = (k - 1) + k * (k - 1) + k * (num_symbols - 1)
        if i == 0 or params <= num_fit_symbols:
            specs.append(HmmSpec(k, False, 0, search.seed + k))
    return specs


def train(spec: HmmSpec, sequences: Sequence[Sequence[int]], num_symbols: int,
          chunk_iter: int) -> HmmParams:
    """Initialise per `spec` and run `spec.num_iter` EM iterations in chunks (the same
    chunking as the search, so a refit reproduces the selected trajectory)."""
    params = initial_params(spec, sequences, num_symbols)
    done = 0
    while done < spec.num_iter:
        step = min(chunk_iter, spec.num_iter - done)
        params = run_em(params, sequences, step)
        done += step
    return params


def refine(spec: HmmSpec, selected: HmmParams, sequences: Sequence[Sequence[int]],
           num_symbols: int, chunk_iter: int) -> HmmParams:
    """The final model on all (newest) sessions, warm-started from the selected one:
    one more chunk of EM instead of the whole trajectory again (half the refit time).
    When validation preferred no EM at all, the initialisation itself on all sessions."""
    if spec.num_iter == 0:
        return initial_params(spec, sequences, num_symbols)
    return run_em(selected, sequences, min(chunk_iter, spec.num_iter))


def _early_stopped(spec: HmmSpec, fit: Sequence[Sequence[int]],
                   val: Sequence[Sequence[int]], num_symbols: int, search: HmmSearch
                   ) -> tuple[float, HmmSpec, HmmParams]:
    params = initial_params(spec, fit, num_symbols)
    best = (log_likelihood(params, val), 0, params)
    done = 0
    while done < search.max_iter:
        params = run_em(params, fit, search.chunk_iter)
        done += search.chunk_iter
        score = log_likelihood(params, val)
        if score <= best[0]:
            break
        best = (score, done, params)
    score, num_iter, params = best
    return score, HmmSpec(spec.num_states, spec.seeded_from_bigram, num_iter, spec.seed), params


def select_hmm(fit: Sequence[Sequence[int]], val: Sequence[Sequence[int]],
               num_symbols: int, search: HmmSearch) -> tuple[HmmSpec, HmmParams]:
    """The winning spec and its parameters trained on the selection data.

    With a validation split the parameters are trained on (the newest part of) the fit
    split only, so validation scores of the mixture stay honest; with BIC they are
    trained on fit + val.
    """
    num_val = sum(len(s) for s in val)
    if num_val >= search.min_val_symbols:
        subset = list(fit[-search.max_select_sessions:])
        num_fit = sum(len(s) for s in subset)
        results = [_early_stopped(spec, subset, val, num_symbols, search)
                   for spec in candidate_specs(search, num_symbols, num_fit)]
        _, spec, params = max(results, key=lambda r: r[0])
        return spec, params
    everything = list(fit) + list(val)
    num_all = sum(len(s) for s in everything)
    best: tuple[float, HmmSpec, HmmParams] | None = None
    for spec in candidate_specs(search, num_symbols, num_all):
        spec = HmmSpec(spec.num_states, spec.seeded_from_bigram, search.bic_iter, spec.seed)
        params = train(spec, everything, num_symbols, search.chunk_iter)
        bic = -2.0 * log_likelihood(params, everything) + (
            num_free_params(params) * math.log(max(num_all, 2)))
        if best is None or bic < best[0]:
            best = (bic, spec, params)
    assert best is not None
    return best[1], best[2]
