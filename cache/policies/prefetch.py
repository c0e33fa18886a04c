"""Prefetches back to HOT ahead of a predicted return, and whether they paid off.

A session whose blocks sit in HOST is scheduled for a prefetch at its forecast
return-time quantile minus the time to copy the blocks back. A prefetched block is
*used* when a request references it in HOT before it leaves HOT, *wasted* when it leaves
first; until then it is pending.

Invariants: `num_prefetched == num_used + num_wasted + num_pending`; a session has at
most one live scheduled prefetch (the latest; older entries are skipped when popped).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

from cache.block_meta import BlockMeta


@dataclass(slots=True)
class PrefetchCounts:
    num_prefetched: int = 0
    num_used: int = 0
    num_wasted: int = 0

    @property
    def num_pending(self) -> int:
        return self.num_prefetched - self.num_used - self.num_wasted


class PrefetchTracker:
    __slots__ = ("counts", "_queue", "_scheduled", "_in_hot", "_seq")

    def __init__(self) -> None:
        self.counts = PrefetchCounts()
        self._queue: list[tuple[float, int, str]] = []
        self._scheduled: dict[str, int] = {}
        self._in_hot: set[BlockMeta] = set()
        self._seq = 0

    def snapshot(self) -> PrefetchCounts:
        """A copy of the counts, for readers outside the policy."""
        counts = self.counts
        return PrefetchCounts(counts.num_prefetched, counts.num_used, counts.num_wasted)

    def schedule(self, session: str, due_s: float) -> None:
        self._seq += 1
        self._scheduled[session] = self._seq
        heapq.heappush(self._queue, (due_s, self._seq, session))

    def cancel(self, session: str) -> None:
        self._scheduled.pop(session, None)

    def is_scheduled(self, session: str) -> bool:
        return session in self._scheduled

    def pop_due(self, now_s: float) -> list[str]:
        """Sessions whose prefetch is due, each once."""
        queue = self._queue
        due: list[str] = []
        while queue and queue[0][0] <= now_s:
            _, seq, session = heapq.heappop(queue)
            if self._scheduled.get(session) == seq:
                del self._scheduled[session]
                due.append(session)
        return due

    def mark(self, block: BlockMeta) -> None:
        """`block` was just prefetched into HOT."""
        self.counts.num_prefetched += 1
        self._in_hot.add(block)

    def on_hot_access(self, block: BlockMeta) -> None:
        if block in self._in_hot:
            self._in_hot.discard(block)
            self.counts.num_used += 1

    def on_hot_remove(self, block: BlockMeta) -> None:
        if block in self._in_hot:
            self._in_hot.discard(block)
            self.counts.num_wasted += 1
