"""Values of a saved predictor pair (`persist.read`) that no fit or learning makes: a
vocabulary without a base symbol, a probability row that is no distribution, a negative
count or weight, gap sums their count cannot make (QA188 F4: such a file, hand-edited with
its digest recomputed, or an old one without a digest, loaded and then failed at every
forecast or gave probabilities outside [0, 1]). Invariant: everything `persist.write`
writes from a real tenant passes; the first value that fails is named.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from cache.gap_memory import MAX_COUNT, MAX_LOG_GAP, MIN_LOG_GAP, ROUNDING

from .vocabulary import BASE_SYMBOLS, OOV_SYMBOL

_SUM_TOLERANCE = 1e-6   # a fitted probability row sums to 1 but for rounding


def impossible_value(meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> tuple[bool, str] | None:
    """(whether it is in the arrays, what) for the first value of a read pair that no
    fit or learning makes, or None; parts the JSON lacks or misspells fail where parsed."""
    def number(value: object, low: float, high: float = MAX_COUNT, whole: bool = False) -> bool:
        return (isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high
                and (not whole or float(value).is_integer()))

    def distributions(key: str) -> bool:
        rows = np.atleast_2d(arrays[key])
        return bool((rows >= 0.0).all() and (np.abs(rows.sum(axis=1) - 1.0) <= _SUM_TOLERANCE).all())

    model = meta.get("model")
    if isinstance(model, dict) and isinstance(model.get("vocab"), list):
        vocab = model["vocab"]
        if len(set(vocab)) != len(vocab) or not set(BASE_SYMBOLS) <= set(vocab) or vocab[-1] != OOV_SYMBOL:
            return False, f"a vocabulary without {', '.join(BASE_SYMBOLS)} and a last {OOV_SYMBOL} each once"
        for key in ("hmm_start", "hmm_trans", "hmm_emit", "ngram_probs"):
            if key in arrays and not distributions(key):
                return True, f"{key} rows that are no probability distributions"
        weights = model.get("weights")
        if isinstance(weights, list) and not (all(number(w, 0.0, 1.0) for w in weights)
                                              and abs(sum(weights) - 1.0) <= _SUM_TOLERANCE):
            return False, f"mixture weights {weights} that are no shares of 1"
        report = model.get("report")
        if isinstance(report, dict) and not (
                all(number(report.get(k), 0.0, whole=True) for k in ("num_sessions", "num_iter", "num_val_symbols"))
                and number(report.get("num_states"), 1.0, whole=True) and number(report.get("fit_s"), 0.0)
                and (report.get("val_top1") is None or number(report.get("val_top1"), 0.0, 1.0))
                and (report.get("val_logloss") is None or number(report.get("val_logloss"), 0.0))):
            return False, "a fit report with a count, time, top-1 or log-loss out of range"
    if "num_learned" in meta and not number(meta["num_learned"], 0.0, whole=True):
        return False, f"num_learned {meta['num_learned']!r}"
    if "num_learned_at_fit" in meta and not number(meta["num_learned_at_fit"], 0.0, meta.get("num_learned", 0), True):
        return False, f"num_learned_at_fit {meta['num_learned_at_fit']!r} (of {meta.get('num_learned')!r} learned)"
    counts = meta.get("tool_counts")
    if isinstance(counts, dict) and not all(number(c, 1.0, whole=True) for c in counts.values()):
        return False, "a tool count that is not a whole number from 1 to 2^53"
    acc = meta.get("accuracy")
    if isinstance(acc, dict) and not (number(acc.get("top1"), 0.0, 1.0) and number(acc.get("logloss"), 0.0)
                                      and number(acc.get("weight"), 0.0)
                                      and number(acc.get("num_scored"), 0.0, whole=True)):
        return False, f"an accuracy {acc} out of range"
    abandons = meta.get("abandons")
    if isinstance(abandons, dict) and not all(number(v, 0.0) for v in abandons.values()):
        return False, f"abandon counts {abandons} out of range"
    stats = arrays.get("durations_stats")
    if stats is not None and stats.ndim == 2 and stats.shape[1] == 3 and len(stats):
        n, total, squares = stats[:, 0], stats[:, 1], stats[:, 2]
        least = np.where(n > 0, total * total / np.maximum(n, 1.0) / ROUNDING - 1e-9, 0.0)
        if not ((n >= 0) & (n <= MAX_COUNT) & (n == np.floor(n))
                & (total >= n * MIN_LOG_GAP * ROUNDING) & (total <= n * MAX_LOG_GAP * ROUNDING)
                & (squares >= np.maximum(least, 0.0))
                & (squares <= n * max(MIN_LOG_GAP ** 2, MAX_LOG_GAP ** 2) * ROUNDING)).all():
            return True, "gap statistics (durations_stats) out of range"
    return None
