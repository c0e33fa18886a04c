"""Interpolated Kneser-Ney table: distributions, back-off, persistence arrays."""
from __future__ import annotations

import numpy as np

from agents_trace.predict.ngram import BOS_ID, NgramTable, fit_ngram

SEQS = [[0, 1, 2, 3], [0, 1, 2, 3], [0, 2, 1, 3], [0, 1, 3]]


def test_fit_ngram_rows_are_distributions() -> None:
    table = fit_ngram(SEQS, 5, order=3)
    np.testing.assert_allclose(table.probs.sum(axis=1), 1.0)
    assert (table.probs > 0).all()


def test_fit_ngram_prefers_seen_continuations() -> None:
    table = fit_ngram(SEQS, 5, order=3)
    after_0_1 = table.lookup(table.context_of([0, 1]))
    assert int(np.argmax(after_0_1)) == 2
    start = table.lookup(table.context_of([]))
    assert int(np.argmax(start)) == 0


def test_fit_ngram_unseen_context_backs_off_to_lower_order() -> None:
    table = fit_ngram(SEQS, 5, order=3)
    # (3, 0) never occurred; KN for it equals the order-2 distribution after 0.
    np.testing.assert_array_equal(table.lookup((3, 0)), table.lookup((0,)))
    # Entirely unseen ids fall back to the unigram (continuation) row.
    np.testing.assert_array_equal(table.lookup((4, 4)), table.lookup(()))


def test_context_of_pads_with_bos() -> None:
    table = fit_ngram(SEQS, 5, order=4)
    assert table.context_of([]) == (BOS_ID, BOS_ID, BOS_ID)
    assert table.context_of([7]) == (BOS_ID, BOS_ID, 7)
    assert table.context_of([1, 2, 3, 4]) == (2, 3, 4)


def test_ngram_arrays_round_trip() -> None:
    table = fit_ngram(SEQS, 5, order=3)
    again = NgramTable.from_arrays(table.to_arrays())
    assert again.order == table.order and again.rows == table.rows
    np.testing.assert_array_equal(again.probs, table.probs)


def test_fit_ngram_empty_data_is_uniform() -> None:
    table = fit_ngram([], 4, order=3)
    np.testing.assert_allclose(table.lookup(table.context_of([1])), 0.25)
