"""Ids that sort by when they were made: creation microseconds, then random bits.

Session ids (`agents_trace.sessions`) and response ids (`gateway.responses_routes`) are
primary keys of SQLite B-trees (the trace store, the response archive). A random id puts
every new row on a random leaf page; one that sorts by creation time appends at the right
edge (benchmarks/bench_trace_store.py: 2.6x cheaper writes at 200,000 sessions).

Invariants: the first 13 hex digits are the creation time in microseconds (so ids made
later sort after, until the year 4253); the rest are `random_bits` bits from the
operating system's generator (`random_bits`, which the gateway's ids use too: not
`random`, whose Mersenne Twister one tenant could rebuild from a few hundred of its own
ids, then predict every id made next and count other tenants' operations in between).
"""
from __future__ import annotations

import os


def random_bits(num_bits: int) -> int:
    """A number of `num_bits` bits from the operating system's generator (`os.urandom`,
    about 0.5 µs a call here)."""
    return int.from_bytes(os.urandom(-(-num_bits // 8)), "big") >> (-num_bits % 8)


def time_ordered_hex(now_s: float, num_random_bits: int) -> str:
    """13 hex digits of `now_s` in microseconds, then `num_random_bits` random bits in hex."""
    micros = max(0, int(now_s * 1e6))
    return f"{micros:013x}{random_bits(num_random_bits):0{-(-num_random_bits // 4)}x}"
