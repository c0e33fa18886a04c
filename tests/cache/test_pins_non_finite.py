"""A pin whose deadline is not finite is refused: a NaN at the top of the deadline heap
stopped every later pin of the worker from expiring (QA126 #1, unit-level)."""
import math

import pytest

from cache.policies.pins import PinBook


@pytest.mark.parametrize("until_s", [math.nan, math.inf])
def test_a_pin_with_a_deadline_that_is_not_finite_is_refused_and_stops_no_expiry(until_s):
    book = PinBook()
    assert book.pin("poisoned", "beta", until_s, 4, cap=100, floor=0.0) is False
    assert book.num_refused == 1 and book.num_pinned_blocks("beta") == 0
    assert book.pin("alpha-session", "alpha", 5.0, 4, cap=100, floor=0.0)
    assert book.expire(10.0) == ["alpha-session"] and book.num_pinned_blocks("alpha") == 0
