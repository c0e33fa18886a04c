"""Requests in flight in a replay with `hold` (`--hold`): the HOT blocks each holds until
it ends.

A request that arrived at t holds the references `acquire` and `commit` gave it until
`CostModel.end_s`: t + its simulated TTFT + its output tokens x `decode_s_per_token`. The
replay calls `release_until(now)` before each request and each policy tick, which
releases every request that ended at or before `now`, and `release_all` after the last
request. So a request finds HOT full of the blocks of the requests still running, as it
would on a worker, where without `hold` it finds every block released.

Invariants: each held request's blocks are released exactly once, earliest end first
(equal ends: in the order they were held), each with the manager's clock at that end, so
a policy hears of every release at its own time; the clock never goes back, because an
end is released before any later moment is replayed.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from cache.block_manager import BlockManager


@dataclass(slots=True)
class InFlight:
    """The requests of one replay that still hold blocks, by end time. `clock` is the
    replay's `SimClock` (the manager's clock)."""

    manager: BlockManager
    clock: object
    _ends: list[tuple[float, int, list[int]]] = field(default_factory=list)
    _num_held: int = 0

    def __len__(self) -> int:
        return len(self._ends)

    def hold(self, end_s: float, hot_ids: list[int]) -> None:
        """Keep `hot_ids` (one reference each, the caller's) until `end_s`."""
        heapq.heappush(self._ends, (end_s, self._num_held, hot_ids))
        self._num_held += 1

    def release_until(self, now_s: float) -> None:
        """Release every request that ended at or before `now_s`, in end order."""
        ends = self._ends
        while ends and ends[0][0] <= now_s:
            end_s, _, hot_ids = heapq.heappop(ends)
            self.clock.now_s = end_s
            self.manager.release(hot_ids)

    def release_all(self) -> None:
        """Release every request still held (the trace is over), in end order."""
        self.release_until(float("inf"))
