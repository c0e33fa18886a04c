"""Interpolated Kneser-Ney n-gram over a tenant's step ids, compiled to a lookup table.

Why: per-tenant data is small (tens to thousands of short sessions) and the next step is
mostly decided by the last two or three steps. KN smoothing beats add-alpha because it
discounts seen counts by a data-driven D and gives the freed mass to a lower order built
from *continuation* counts (in how many contexts a symbol appears), not raw frequency.

Invariants: every stored row is a full distribution over the vocabulary (sums to 1, all
entries > 0 because the recursion bottoms out in the uniform distribution). The table
holds one row per context seen in training at every order 0..order-1; a query uses the
longest stored suffix of its context, which is exact, because KN for an unseen context
equals the next lower order.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

BOS_ID = -1
DEFAULT_DISCOUNT = 0.75


@dataclass(frozen=True, slots=True)
class NgramTable:
    """order: n of the n-gram (contexts hold up to order-1 previous ids, BOS = -1).

    `rows[context]` indexes `probs`; contexts are tuples of ids of every length
    0..order-1.
    """

    order: int
    rows: dict[tuple[int, ...], int]
    probs: np.ndarray

    def context_of(self, history: Sequence[int]) -> tuple[int, ...]:
        """The last order-1 ids of `history`, left-padded with BOS."""
        width = self.order - 1
        if width == 0:
            return ()
        tail = tuple(history[-width:])
        return (BOS_ID,) * (width - len(tail)) + tail

    def row_of(self, context: tuple[int, ...]) -> int:
        """Row of `probs` for `context` (a `context_of` result): its longest stored
        suffix."""
        rows = self.rows
        for start in range(len(context)):
            row = rows.get(context[start:])
            if row is not None:
                return row
        return rows[()]

    def lookup(self, context: tuple[int, ...]) -> np.ndarray:
        """Distribution of the next id after `context` (a `context_of` result)."""
        return self.probs[self.row_of(context)]

    def predictive(self, sequences: Sequence[Sequence[int]]) -> np.ndarray:
        """P(x_t | x_<t) rows for every position, sequence-major (like the HMM's)."""
        out = []
        for seq in sequences:
            for t in range(len(seq)):
                out.append(self.lookup(self.context_of(seq[:t])))
        width = self.probs.shape[1]
        return np.array(out) if out else np.empty((0, width))

    def to_arrays(self) -> dict[str, np.ndarray]:
        width = max(self.order - 1, 1)
        contexts = np.full((len(self.rows), width), -2, dtype=np.int64)
        lengths = np.zeros(len(self.rows), dtype=np.int64)
        for ctx, row in self.rows.items():
            contexts[row, : len(ctx)] = ctx
            lengths[row] = len(ctx)
        return {"ngram_contexts": contexts, "ngram_lengths": lengths,
                "ngram_probs": self.probs, "ngram_order": np.array(self.order)}

    @staticmethod
    def from_arrays(arrays: dict[str, np.ndarray]) -> "NgramTable":
        contexts, lengths = arrays["ngram_contexts"], arrays["ngram_lengths"]
        rows = {tuple(int(x) for x in contexts[i, : int(lengths[i])]): i
                for i in range(contexts.shape[0])}
        return NgramTable(int(arrays["ngram_order"]), rows,
                          np.asarray(arrays["ngram_probs"], dtype=np.float64))


def _discount(counts: dict[tuple[int, ...], dict[int, float]]) -> float:
    """Ney's D = n1 / (n1 + 2 n2) from the counts-of-counts, kept in [0.1, 0.95]."""
    n1 = n2 = 0
    for nexts in counts.values():
        for c in nexts.values():
            n1 += c == 1
            n2 += c == 2
    if n1 == 0 or n2 == 0:
        return DEFAULT_DISCOUNT
    return min(0.95, max(0.1, n1 / (n1 + 2.0 * n2)))


def fit_ngram(sequences: Sequence[Sequence[int]], num_symbols: int, order: int
              ) -> NgramTable:
    """Interpolated KN of the given order (>= 1) over ids 0..num_symbols-1."""
    width = order - 1
    # counts[k][context of length k][next id]
    counts: list[dict[tuple[int, ...], dict[int, float]]] = [
        defaultdict(lambda: defaultdict(float)) for _ in range(order)]
    for seq in sequences:
        padded = (BOS_ID,) * width + tuple(seq)
        for t, symbol in enumerate(seq):
            full = padded[t: t + width]
            counts[width][full][symbol] += 1.0
    # Lower orders use continuation counts: distinct left extensions of (context, next).
    for k in range(width - 1, -1, -1):
        for ctx, nexts in counts[k + 1].items():
            for symbol in nexts:
                counts[k][ctx[1:]][symbol] += 1.0
    discounts = [_discount(counts[k]) for k in range(order)]

    uniform = np.full(num_symbols, 1.0 / num_symbols)
    rows: dict[tuple[int, ...], int] = {}
    table: list[np.ndarray] = []

    def dist(k: int, ctx: tuple[int, ...]) -> np.ndarray:
        if k < 0:
            return uniform
        row = rows.get(ctx)
        if row is not None:
            return table[row]
        lower = dist(k - 1, ctx[1:]) if k > 0 else uniform
        nexts = counts[k].get(ctx)
        if not nexts:
            return lower
        ids = np.fromiter(nexts.keys(), dtype=np.int64, count=len(nexts))
        vals = np.fromiter(nexts.values(), dtype=np.float64, count=len(nexts))
        total, d = vals.sum(), discounts[k]
        p = lower * (d * len(nexts) / total)
        p[ids] += np.maximum(vals - d, 0.0) / total
        rows[ctx] = len(table)
        table.append(p)
        return p

    dist(0, ())
    if () not in rows:
        rows[()] = len(table)
        table.append(uniform)
    for k in range(1, order):
        for ctx in list(counts[k].keys()):
            dist(k, ctx)
    return NgramTable(order, rows, np.array(table))
