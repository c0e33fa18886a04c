"""Fitting one StepModel from a tenant's finished sessions (pure function, no I/O).

Protocol (nothing here ever sees test data):
1. Sessions are kept in arrival order; every `validation_every`-th one is the validation
   split, the rest the fit split.
2. The HMM is chosen on the split (hmm_search.py); the KN n-gram is built on the fit split.
3. The interpolation weights (HMM, n-gram, uniform) are fitted by MAP-EM on the
   validation positions (mixture.py).
4. The recency adaptation (recency.py) is tuned by a prequential pass over all sessions
   in order: each validation session is scored with the memory of the sessions before
   it, then remembered. It is switched on only if it beats the static forecast by at
   least `recency_min_gain` nats per validation symbol.
5. The HMM is refined on the newest `max_train_sessions` (warm start) and the n-gram
   rebuilt on all sessions; weights and recency parameters carry over.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .hmm import forward_predictive
from .hmm_search import HmmSearch, refine, select_hmm
from .mixture import fit_weights
from .ngram import fit_ngram
from .recency import RECENCY_ORDERS, RecencyMemory, RecencyParams, adapt
from .step_model import FitReport, StepModel, step_class
from .vocabulary import MAX_TOOL_SYMBOLS, Vocabulary, capped_sequences, with_end


@dataclass(frozen=True, slots=True)
class FitConfig:
    ngram_order: int = 4
    validation_every: int = 5
    hmm: HmmSearch = field(default_factory=HmmSearch)
    prior_weights: tuple[float, float, float] = (0.25, 0.7, 0.05)
    prior_strength: float = 20.0
    recency_decays: tuple[float, ...] = (0.5, 0.7, 0.85, 0.95)
    recency_strengths: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
    recency_min_gain: float = 0.01
    max_tuning_sessions: int = 300
    recency_warmup_sessions: int = 64
    max_session_steps: int = 512
    max_tool_symbols: int = MAX_TOOL_SYMBOLS


def prepare(sequences: Sequence[Sequence[str]], max_steps: int, abstract: bool,
            max_tools: int = MAX_TOOL_SYMBOLS) -> list[list[str]]:
    """END-terminated, length-capped (END kept), class-mapped when `abstract`, else with
    the tools past the `max_tools` most frequent spelled `<other tool>` (vocabulary.py)."""
    out = []
    for seq in sequences:
        seq = with_end(seq)
        if len(seq) > max_steps:
            seq = seq[: max_steps - 1] + seq[-1:]
        out.append([step_class(s) for s in seq] if abstract else seq)
    return out if abstract else capped_sequences(out, max_tools)


def _recency_evidence(sequences: Sequence[Sequence[str]], is_val: Sequence[bool],
                      vocab: Vocabulary, decay: float, warmup: int) -> np.ndarray:
    """Per validation position: [r1_true, r1_total, r3_true, r3_total], prequentially.
    The first `warmup` sessions only fill the memory; `is_val` marks the scored ones."""
    memory = RecencyMemory(decay)
    rows = []
    for i, (seq, val) in enumerate(zip(sequences, is_val)):
        if val and i >= warmup:
            for t, symbol in enumerate(seq):
                row = []
                target = vocab.encode_one(symbol)
                for order in RECENCY_ORDERS:
                    counts, total = memory.evidence(seq[:t], order)
                    hit = sum(w for s, w in counts.items() if vocab.encode_one(s) == target)
                    row += [hit, total]
                rows.append(row)
        memory.learn(seq)
    return np.array(rows, dtype=np.float64).reshape(-1, 2 * len(RECENCY_ORDERS))


def _adapted(p_static: np.ndarray, evidence: np.ndarray, strength: float) -> np.ndarray:
    p = p_static
    for j in range(len(RECENCY_ORDERS)):
        hit, total = evidence[:, 2 * j], evidence[:, 2 * j + 1]
        p = (hit + strength * p) / (total + strength)
    return p


def _select_recency(sequences: Sequence[Sequence[str]], is_val: Sequence[bool],
                    vocab: Vocabulary, p_static: np.ndarray, warmup: int,
                    config: FitConfig) -> RecencyParams | None:
    """p_static: static probability of the true symbol at each scored position."""
    if p_static.size == 0:
        return None
    base = float(np.log(p_static).sum())
    best: tuple[float, RecencyParams] | None = None
    for decay in config.recency_decays:
        evidence = _recency_evidence(sequences, is_val, vocab, decay, warmup)
        for strength in config.recency_strengths:
            score = float(np.log(_adapted(p_static, evidence, strength)).sum())
            if best is None or score > best[0]:
                best = (score, RecencyParams(decay, strength))
    assert best is not None
    if best[0] - base < config.recency_min_gain * p_static.size:
        return None
    return best[1]


def _val_metrics(model: StepModel, history: Sequence[Sequence[str]],
                 is_val: Sequence[bool], warmup: int) -> tuple[float, float, int]:
    """Top-1 and log-loss of the (fit-split) model on the scored validation sessions,
    recency included, replayed in arrival order."""
    memory = RecencyMemory(model.recency.decay) if model.recency else None
    hits, loss, count = 0, 0.0, 0
    for i, (seq, val_flag) in enumerate(zip(history, is_val)):
        if val_flag and i >= warmup:
            state = model.start_state()
            for t, symbol in enumerate(seq):
                p = model.static_next(state)
                if memory is not None and model.recency is not None:
                    p = adapt(p, memory, model.recency, seq[:t], model.vocab)
                target = model.encode(symbol)
                hits += int(np.argmax(p) == target)
                loss -= math.log(p[target] / p.sum())
                count += 1
                state = model.advance(state, target)
        if memory is not None:
            memory.learn(seq)
    return (hits / count if count else 0.0), (loss / count if count else 0.0), count


def fit_step_model(sequences: Sequence[Sequence[str]], config: FitConfig,
                   abstract: bool = False) -> StepModel:
    """Fit on finished sessions in arrival order (END appended where missing)."""
    started = time.perf_counter()
    seqs = prepare(sequences, config.max_session_steps, abstract, config.max_tool_symbols)
    vocab = Vocabulary.from_sequences(seqs)
    ids = [vocab.encode(s) for s in seqs]
    every = config.validation_every
    is_val = [len(seqs) >= every and i % every == every - 1 for i in range(len(seqs))]
    fit_ids = [s for s, v in zip(ids, is_val) if not v]
    val_ids = [s for s, v in zip(ids, is_val) if v]

    spec, hmm_fit = select_hmm(fit_ids, val_ids, vocab.size, config.hmm)
    weights = np.asarray(config.prior_weights, dtype=np.float64)
    weights = weights / weights.sum()
    recency = None
    val_top1 = val_loss = None
    num_val = sum(len(s) for s in val_ids)
    if val_ids:
        ngram_fit = fit_ngram(fit_ids, vocab.size, config.ngram_order)
        flat = np.concatenate([np.asarray(s, dtype=np.int64) for s in val_ids])
        rows = np.arange(flat.size)
        components = np.stack([
            forward_predictive(hmm_fit, val_ids)[rows, flat],
            ngram_fit.predictive(val_ids)[rows, flat],
            np.full(flat.size, 1.0 / vocab.size)], axis=1)
        weights = fit_weights(components, weights, config.prior_strength)
        # Recency tuning and the reported validation accuracy replay only the newest
        # `max_tuning_sessions` (after a memory warm-up): bounded refit cost.
        first_scored = max(0, len(seqs) - config.max_tuning_sessions)
        begin = max(0, first_scored - config.recency_warmup_sessions)
        window = slice(begin, len(seqs))
        scored = np.repeat([i >= first_scored for i, v in enumerate(is_val) if v],
                           [len(s) for s in val_ids])
        if not abstract:
            recency = _select_recency(seqs[window], is_val[window], vocab,
                                      (components @ weights)[scored],
                                      first_scored - begin, config)
        probe = StepModel(vocab, hmm_fit, ngram_fit, tuple(float(w) for w in weights),
                          recency, abstract, _empty_report())
        val_top1, val_loss, num_val = _val_metrics(probe, seqs[window], is_val[window],
                                                   first_scored - begin)

    hmm = refine(spec, hmm_fit, ids[-config.hmm.max_train_sessions:], vocab.size,
                 config.hmm.chunk_iter)
    ngram = fit_ngram(ids, vocab.size, config.ngram_order)
    report = FitReport(len(seqs), spec.num_states, spec.seeded_from_bigram, spec.num_iter,
                       tuple(float(w) for w in weights), recency, val_top1, val_loss,
                       num_val, time.perf_counter() - started)
    return StepModel(vocab, hmm, ngram, report.weights, recency, abstract, report)


def _empty_report() -> FitReport:
    return FitReport(0, 0, False, 0, (0.0, 0.0, 0.0), None, None, None, 0, 0.0)
