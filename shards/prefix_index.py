"""The router's view of which worker holds which cached block, per tier.

Fed by each worker's cache events (`BlockStored` / `BlockRemoved` / `AllCleared`,
applied in the order the worker emitted them), corrected by a periodic full snapshot
from the worker (`replace`), and emptied for a worker at once when it is fenced, dies
or restarts (`purge`). It is advisory: a stale entry costs a worse routing choice, never
wrong KV, because the worker verifies every block itself.

Invariants:
- `_holders[h][w]` exists iff `h in _by_worker[w]`; a worker holds a hash in one tier;
- after `purge(w)` no hash lists `w`;
- replaying a worker's events in order after `replace(w, snapshot)` gives exactly the
  worker's matchable set (the worker emits them on one ordered channel).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cache.events import AllCleared, BlockRemoved, BlockStored, CacheEvent
from cache.hashing import BlockHash
from cache.tiers import Tier


@dataclass(slots=True)
class PrefixRun:
    """A worker's cached leading run of a prompt: `num_hot_blocks` then `num_host_blocks`."""

    num_hot_blocks: int = 0
    num_host_blocks: int = 0

    @property
    def num_blocks(self) -> int:
        return self.num_hot_blocks + self.num_host_blocks


class PrefixIndex:
    """block hash -> {worker id: tier}, with a reverse map per worker for O(own) purges."""

    def __init__(self) -> None:
        self._holders: dict[BlockHash, dict[str, Tier]] = {}
        self._by_worker: dict[str, set[BlockHash]] = {}

    def num_blocks(self, worker_id: str) -> int:
        return len(self._by_worker.get(worker_id, ()))

    def workers_holding(self, block_hash: BlockHash) -> dict[str, Tier]:
        return dict(self._holders.get(block_hash, {}))

    def apply(self, worker_id: str, events: Iterable[CacheEvent]) -> None:
        """Apply one worker's cache events, oldest first."""
        for event in events:
            if isinstance(event, BlockStored):
                for block_hash in event.hashes:
                    self._add(worker_id, block_hash, event.tier)
            elif isinstance(event, BlockRemoved):
                for block_hash in event.hashes:
                    self._remove(worker_id, block_hash, event.tier)
            elif isinstance(event, AllCleared):
                self.purge(worker_id)

    def replace(self, worker_id: str, hot: Iterable[BlockHash], host: Iterable[BlockHash]) -> None:
        """Reconcile: the worker's holdings become exactly this snapshot."""
        self.purge(worker_id)
        for block_hash in hot:
            self._add(worker_id, block_hash, Tier.HOT)
        for block_hash in host:
            self._add(worker_id, block_hash, Tier.HOST)

    def purge(self, worker_id: str) -> None:
        """Forget everything `worker_id` held (it died, was fenced or restarted)."""
        for block_hash in self._by_worker.pop(worker_id, set()):
            holders = self._holders.get(block_hash)
            if holders is not None:
                holders.pop(worker_id, None)
                if not holders:
                    del self._holders[block_hash]

    def runs(self, hashes: Sequence[BlockHash], worker_ids: Iterable[str]) -> dict[str, PrefixRun]:
        """Each worker's cached leading run of `hashes` (HOT blocks after a HOST one end
        the run, as in the block manager's match). Every worker gets an entry."""
        runs = {w: PrefixRun() for w in worker_ids}
        live = {w for w in runs}
        in_host: set[str] = set()
        for block_hash in hashes:
            if not live:
                break
            holders = self._holders.get(block_hash)
            if not holders:
                break
            for worker_id in list(live):
                tier = holders.get(worker_id)
                if tier is None or (tier is Tier.HOT and worker_id in in_host):
                    live.discard(worker_id)
                elif tier is Tier.HOT:
                    runs[worker_id].num_hot_blocks += 1
                else:
                    in_host.add(worker_id)
                    runs[worker_id].num_host_blocks += 1
        return runs

    def _add(self, worker_id: str, block_hash: BlockHash, tier: Tier) -> None:
        self._holders.setdefault(block_hash, {})[worker_id] = tier
        self._by_worker.setdefault(worker_id, set()).add(block_hash)

    def _remove(self, worker_id: str, block_hash: BlockHash, tier: Tier) -> None:
        holders = self._holders.get(block_hash)
        if holders is None or holders.get(worker_id) is not tier:
            return  # NOTE: a removal in another tier than the one held is stale: ignore it
        del holders[worker_id]
        if not holders:
            del self._holders[block_hash]
        self._by_worker[worker_id].discard(block_hash)
