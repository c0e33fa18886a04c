"""Ids that sort by when they were made: creation microseconds, then random bits.

Session ids (`agents_trace.sessions`) and response ids (`gateway.responses_routes`) are
primary keys of SQLite B-trees (the trace store, the response archive). A random id puts
every new row on a random leaf page; one that sorts by creation time appends at the right
edge (benchmarks/bench_trace_store.py: 2.6x cheaper writes at 200,000 sessions).

Invariants: the first 13 hex digits are the creation time in microseconds (so ids made
later sort after, until the year 4253); the rest are `random_bits` bits from `random`.
NOTE: ids need uniqueness, not secrecy (every read is scoped to its tenant), and an
`os.urandom` call costs ~40 µs on small VMs, so `random` (seeded from the OS once) it is.
"""
from __future__ import annotations

import random


def time_ordered_hex(now_s: float, random_bits: int) -> str:
    """13 hex digits of `now_s` in microseconds, then `random_bits` random bits in hex."""
    micros = max(0, int(now_s * 1e6))
    return f"{micros:013x}{random.getrandbits(random_bits):0{-(-random_bits // 4)}x}"
