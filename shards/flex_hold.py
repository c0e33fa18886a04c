"""When the workers hold their flex work: while any default-tier request is between its
routing and its first token (`Router.num_default_prefills`), every worker pauses its flex
requests (`WorkItem.flex`), so on a machine whose workers share its cores a batch does not
slow an agent's prefill. Flex work runs in the gaps: while the agents' requests decode,
and between their steps.

Invariants:
- a `HoldFlex` message goes to a worker only when what it was last told changes (a
  worker added or removed is told afresh: a restarted worker starts unheld);
- disabled (`flex_hold = false`), nothing is ever sent;
- a worker never waits on a hold for a default request it cannot admit: it ignores the
  hold while one waits in its queue (shards/worker_flex.py), so held flex requests that
  fill its slots or memory go on and make room.
"""
from __future__ import annotations

from collections.abc import Iterable

from shards.protocol import HoldFlex


class FlexHoldSwitch:
    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self._told: dict[str, bool] = {}   # worker -> what it was last told

    def sends(self, num_default_prefills: int, workers: Iterable[str]) -> list[tuple[str, HoldFlex]]:
        """The messages that bring `workers` in line with the hold."""
        held = self.enabled and num_default_prefills > 0
        out = []
        for worker_id in workers:
            if self._told.get(worker_id, False) != held:
                self._told[worker_id] = held
                out.append((worker_id, HoldFlex(held)))
        return out

    def forget(self, worker_id: str) -> None:
        """`worker_id` left, or starts anew: unheld, as a new worker is."""
        self._told.pop(worker_id, None)
