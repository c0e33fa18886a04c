"""A worker's side of the flex hold (`shards.flex_hold`): while held, its flex requests
(`WorkItem.flex`) neither prefill nor decode.

`FlexHolding` is a part of `shards.worker.WorkerLoop` (a base class), using its `waiting`,
`running` and `prefilling`. Invariants: the hold is ignored while a default-tier request
waits in the worker's queue (it could not be admitted: the held flex requests may be what
fills the slots or the memory, so they go on and make room); a worker with only held flex
work has no work (it waits on its inbox, for the release, instead of spinning).
"""
from __future__ import annotations

from collections.abc import Iterable


class FlexHolding:
    flex_held: bool = False   # what the engine last said (`HoldFlex`)

    def holds_flex(self) -> bool:
        return self.flex_held and not len(self.waiting.default)

    def runnable(self, requests: Iterable) -> list:
        """`requests` (sequences or prefill tasks, each with its `item`) that may compute now."""
        if not self.holds_flex():
            return list(requests)
        return [request for request in requests if not request.item.flex]

    def has_work(self) -> bool:
        if not self.holds_flex():
            return bool(len(self.waiting) or self.running or self.prefilling)
        return bool(self.runnable(self.running.values()) or self.runnable(self.prefilling.values()))
