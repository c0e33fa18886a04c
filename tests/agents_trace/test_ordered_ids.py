"""Ids made later sort after: creation microseconds first, random bits after."""
from __future__ import annotations

import random

from agents_trace.ordered_ids import random_bits, time_ordered_hex


def test_the_time_comes_first_in_thirteen_hex_digits_then_the_random_bits() -> None:
    made = time_ordered_hex(1.5, 44)
    assert made[:13] == f"{1_500_000:013x}" == "000000016e360"
    assert len(made) == 24 and len(time_ordered_hex(1.5, 24)) == 19 and len(time_ordered_hex(1.5, 1)) == 14
    assert time_ordered_hex(-5.0, 8).startswith("0" * 13)   # a clock before 1970 does not go negative


def test_the_random_bits_are_the_operating_systems_not_randoms() -> None:
    """Seeding `random` (a benchmark, a test, or anyone who learned its state) does not
    make the ids repeat: one tenant cannot predict the ids others get."""
    random.seed(3)
    first = [time_ordered_hex(1.5, 44) for _ in range(3)]
    random.seed(3)
    assert [time_ordered_hex(1.5, 44) for _ in range(3)] != first
    values = [random_bits(5) for _ in range(2000)]
    assert min(values) == 0 and max(values) == 31 and len(set(values)) == 32   # every 5-bit value, none past
    assert all(random_bits(96).bit_length() <= 96 for _ in range(100))


def test_ids_sort_by_creation_time_whatever_their_random_bits() -> None:
    rng = random.Random(0)
    times = sorted(rng.uniform(1.7e9, 1.8e9) for _ in range(500))
    made = [time_ordered_hex(t, 44) for t in times]
    assert sorted(made) == made and len(set(made)) == len(made)
    assert all(len(m) == 24 and int(m, 16) >= 0 for m in made)
