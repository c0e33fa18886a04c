"""How long a running request may wait for its next token while newcomers prefill.

A worker runs newcomers' prefills first. With a bound (`max_decode_stall_s`), a running
request is decoded before its wait passes it, judged at prefill chunk boundaries with
the chunks' smoothed duration: either it rides the next chunk's forward pass (`riders`)
or, when decodes cannot ride, the chunks yield to a decode pass (`must_yield`).

Invariants: without a bound nothing is ever due (prefill first, as before); a decode
pass is asked for only for a request not decoded since the last chunk ended, so with a
bound shorter than a chunk, chunks and decode passes alternate and prefills never
starve; riders are the longest-waiting first, at most `max_riders`.
"""
from __future__ import annotations

from collections.abc import Iterable

CHUNK_EWMA = 0.3  # weight of the newest chunk in the smoothed duration


class StallBound:
    def __init__(self, bound_s: float | None) -> None:
        self.bound_s = bound_s
        self.chunk_s = 0.0  # smoothed duration of a prefill chunk
        self.chunk_ended_s = float("-inf")  # when the last chunk ended

    def chunk_done(self, duration_s: float, now_s: float) -> None:
        """A prefill chunk (with any riders) took `duration_s` and ended at `now_s`."""
        self.chunk_s = duration_s if not self.chunk_s else (1 - CHUNK_EWMA) * self.chunk_s + CHUNK_EWMA * duration_s
        self.chunk_ended_s = now_s

    def riders(self, running: Iterable, now_s: float, max_riders: int) -> list:
        """The running sequences (with `last_token_s`) that would pass the bound before
        their next chance to ride, the end of the chunk after the next one."""
        if self.bound_s is None:
            return []
        ends_s = now_s + 2 * self.chunk_s
        due = sorted((seq for seq in running if ends_s - seq.last_token_s >= self.bound_s),
                     key=lambda seq: seq.last_token_s)
        return due[:max(1, max_riders)]

    def must_yield(self, running: Iterable, now_s: float) -> bool:
        """Whether the next chunk must wait for a decode pass: a sequence not decoded
        since the last chunk would pass the bound by the end of another."""
        if self.bound_s is None:
            return False
        oldest_s = min((seq.last_token_s for seq in running), default=None)
        return (oldest_s is not None and oldest_s < self.chunk_ended_s
                and now_s + self.chunk_s - oldest_s >= self.bound_s)
